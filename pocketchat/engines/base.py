"""What every backend shares: the harness and the recipe of one answer.

One answer (`EngineBase._answer`), each step in the module named for it:
1. the prompt: the conversation fitted into the window and rendered (`render.plan_prompt`),
   or a raw prompt's tokens as given (`complete`); the answer's mask and logprobs and its
   tool-call parser (`constrain.request`);
2. reuse: the prompt cache across conversations (`prompt_cache.PromptCache`) and the prefix
   cache (`prefix_cache.PrefixCache`) keep the longest part of the state the prompt shares;
3. the rest of the prompt is fed in pieces with a `Chunk.progress` between them; a long
   system message is parked for other conversations and, on a state that cannot be cut back,
   a checkpoint is taken where the conversation ends (`_read_prompt`);
4. the token loop (`loop.steps`): sampling, the ends, the thought's budget; the text goes
   through `answer.AnswerStream` (reasoning split off, tool calls parsed);
5. the final chunk carries the stats and why the answer stopped; after it, when the caller
   reads on, the state is settled for the next turn (`settle.settle`).

A backend implements its runtime: `_load`, `_apply_template`, `_encode`, `_prompt_tokens`,
`_begin` (the sampler), `_run_step` (decode a step's parts: `slots.Part`), `_sample_at` (the
next token at a batch index), `_piece` (a token's bytes), `end_tokens`, `_ll_tokenizer`,
`_token_bytes`, `_free`, and its state operations (`cache`, `_save_file`, `_load_file`). Its
sequences are fed through one `slots.Batcher` (`solo` for a context of one sequence).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Sequence

from pocketchat.errors import ContextOverflow, EngineError, UnsupportedRequest
from pocketchat.engines import saved_state
from pocketchat.engines.answer import AnswerStream, Piece, TextStream
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.constrain.request import call_parser, token_control
from pocketchat.engines.context import reply_reserve
from pocketchat.engines.loop import CLOSING_LINE, Cancelled, Meter, Step, Thought, steps
from pocketchat.engines.prefix_cache import PrefixCache
from pocketchat.engines.prompt_cache import PromptCache
from pocketchat.engines.rate import RecentRate
from pocketchat.engines.render import (PromptPlan, closing_tokens, history_tokens, plan_prompt,
                                       render)
from pocketchat.engines.sampling import SamplingSettings, merge_sampling
from pocketchat.engines.settle import settle
from pocketchat.engines.slots import Batcher, StepAborted, StepCancelled, Work
from pocketchat.engines.types import (ChatOptions, Chunk, EngineInfo, Message, PromptProgress,
                                      Stats, StopReason)
from pocketchat.types import LoadPlan

ProgressFn = Callable[[str, float], None]
__all__ = ["Cancelled", "EngineBase", "SamplingSettings", "Step"]


@dataclass
class Progress:
    """One answer's figures as it goes (what its chunks' stats are made of)."""

    plan: PromptPlan
    started: float
    prepared: int  # tokens evaluated after the previous answer, for this one
    kept: int = 0  # tokens of the prompt reused from the cache
    ttft: float | None = None
    settled: bool = False  # the state ended where this prompt could go on (a boundary)
    rate: RecentRate = field(default_factory=RecentRate)  # decode tok/s of the last seconds
    meter: Meter = field(default_factory=Meter)
    thought: Thought | None = None
    generated: int = 0


class EngineBase:
    """The shared harness; see the module docstring for what a backend implements."""

    info: EngineInfo
    n_ctx: int
    cache: PrefixCache
    plan: LoadPlan
    label = "engine"  # error prefix: "llama.cpp failed: ..."
    _batcher: Batcher
    _seq = 0  # this engine's sequence of the context
    close_timeout: float | None = None  # None: close() waits for an answer in flight
    end_tokens: frozenset[int] = frozenset()  # the tokens that end a generation
    template_source: str = ""  # what the chat template says about itself (set by `_load`)
    knows_thinking_switch: bool = False
    mentions_think: bool = False

    def __init__(self, plan: LoadPlan, path: Path, *, name: str | None = None,
                 on_progress: ProgressFn | None = None) -> None:
        """Check and load the model at `path` as `plan` says; returns when it is ready;
        `on_progress(stage, fraction)` reports the stages."""
        self.plan = plan
        if on_progress:
            on_progress("checking", 0.0)
        self._init_harness()
        self._ll_tok: Any = None
        self.info = self._load(Path(path), name, on_progress)
        self.prompt_cache = self._prompt_cache()
        if on_progress:
            on_progress("ready", 1.0)

    def _prompt_cache(self) -> PromptCache:
        """The cache across conversations, within the plan's budget (off where the backend
        cannot copy a whole sequence state)."""
        if not hasattr(self.cache.ops, "save_seq"):
            return PromptCache(0, note="this backend cannot copy its sequence state: no "
                                       "prompt cache across conversations")
        return PromptCache(int(getattr(self.plan, "prompt_cache_bytes", 0) or 0))

    def status(self) -> dict:
        """Live figures of the engine: its prompt cache across conversations."""
        return {"cache": self.prompt_cache.status()}

    @property
    def thinks(self) -> bool:
        """Whether the model thinks (its template switches or mentions <think>)."""
        return self.knows_thinking_switch or self.mentions_think

    def _init_harness(self) -> None:
        self._cancel = threading.Event()
        self._end_thought = threading.Event()  # the user asked for the answer now
        self._busy = threading.Lock()
        self._active = False
        self._closed = False
        self._prepared = 0  # tokens evaluated after the previous answer, for the next one
        self._settled = False  # the state ends where the next prompt goes on (see settle)
        self._pending: list[int] = []  # the last sampled token, fed after the answer
        self._meter = Meter()

    # -- Engine -----------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> Iterator[Chunk]:
        return self._chat(tuple(messages), options or ChatOptions())

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> Iterator[Chunk]:
        """Stream the continuation of `prompt` (text, or token ids) as raw text (the legacy
        completions endpoint): no template, reasoning split, tools or settling."""
        return self._chat((), options or ChatOptions(), prompt=prompt)

    def cancel(self) -> None:
        if self._active:
            self._cancel.set()
            batcher = getattr(self, "_batcher", None)
            if batcher is not None:  # a submission waiting for its step sees it at once
                batcher.wake()

    def end_thinking(self) -> None:
        """End the thought in flight now; the answer follows (see `types.Engine`)."""
        if self._active:
            self._end_thought.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel.set()
        got = self._busy.acquire(**({} if self.close_timeout is None
                                    else {"timeout": self.close_timeout}))
        try:
            self._free()
            self.prompt_cache.clear()
        finally:
            if got:
                self._busy.release()

    # -- the runtime (see the module docstring) ---------------------------------------------

    def _load(self, path: Path, name: str | None, on_progress: ProgressFn | None) -> EngineInfo:
        raise NotImplementedError

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        raise NotImplementedError

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def _prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A raw prompt's tokens (text encoded as the model wants it; ids as given)."""
        return self._encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]

    def _begin(self, sampling: SamplingSettings, control: TokenControl | None) -> None:
        """Start an answer's sampling; `control` (mask, logprobs) runs on each token's logits."""

    def _run_step(self, parts: list) -> int:
        raise NotImplementedError

    def _sample_at(self, index: int) -> tuple[int, Any]:
        raise NotImplementedError

    def _piece(self, token: int) -> bytes:
        raise NotImplementedError

    def _ll_tokenizer(self) -> Any:
        raise NotImplementedError

    def _token_bytes(self, token: int) -> bytes:
        return self._piece(token)

    def _peak_memory(self) -> int | None:
        return None

    def _free(self) -> None:
        raise NotImplementedError

    def _save_file(self, path: Path, limit: int) -> int:
        return 0

    def _load_file(self, path: Path) -> list[int] | None:
        return None

    # -- feeding the sequence ---------------------------------------------------------------

    def feed(self, tokens: Sequence[int], *, sample: bool = False) -> Any:
        """Decode `tokens` after `cache.tokens` in the batcher's steps, keeping `cache.tokens`
        what the state holds; with `sample`, the (token, logprob) sampled at the last one.
        A cancel keeps the decoded part and raises Cancelled; a failed step's part is cut."""
        if not tokens:
            return None
        if self._cancel.is_set():
            raise Cancelled
        cache, began = self.cache, time.perf_counter()
        work = Work(self._seq, list(tokens), len(cache.tokens),
                    sample=self._sample_at if sample else None, cancel=self._cancel)
        try:
            result = self._batcher.decode(work)
        except StepCancelled as exc:
            cache.tokens.extend(work.tokens[: work.done])
            if isinstance(exc, StepAborted):
                cache.truncate(len(cache.tokens))  # what the aborted step left is cut
            raise Cancelled from None
        except BaseException:
            base = len(cache.tokens)
            cache.tokens.extend(work.tokens[: work.done])
            cache.truncate(base + work.done)  # drop what the failed step left
            raise
        finally:
            self._meter.add(len(tokens), time.perf_counter() - began)
        cache.tokens.extend(work.tokens)
        return result

    def _evaluate(self, tokens: Sequence[int]) -> None:
        self.feed(tokens)

    def piece(self, token: int) -> bytes:
        return self._piece(token)

    def is_end(self, token: int) -> bool:
        return token in self.end_tokens

    def accept(self, tokens: Sequence[int]) -> None:
        control = getattr(self, "_control", None)
        for token in tokens:
            if control is not None:
                control.accept(token)

    # -- one answer -------------------------------------------------------------------------

    def _chat(self, messages: tuple[Message, ...], opts: ChatOptions, *,
              prompt: str | Sequence[int] | None = None) -> Iterator[Chunk]:
        """One answer under the busy lock, let go before the final chunk is handed over and
        taken again, if still free, only to settle the state when the caller reads on."""
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self._busy.acquire(blocking=False):
            raise EngineError("the engine is already answering; cancel that answer first")
        held, inner = True, None
        try:
            self._cancel.clear()
            self._end_thought.clear()
            self._active = True
            inner = self._answer(messages, opts, prompt)
            for chunk in inner:
                if chunk.finish_reason is None:
                    yield chunk
                    continue
                held = self._let_go()
                yield chunk
                if self._closed or not self._busy.acquire(blocking=False):
                    return  # another answer took the engine: this one's settling is skipped
                held = self._active = True
        finally:
            try:
                if inner is not None:
                    inner.close()  # a stopped answer's finally (its generator) runs now
            finally:
                if held:
                    self._let_go()

    def _let_go(self) -> bool:
        """End the answer's hold on the engine (False: nothing is held now)."""
        self._active = False
        self._cancel.clear()
        self._busy.release()
        return False

    def _setup(self, messages: tuple[Message, ...], opts: ChatOptions,
               prompt: str | Sequence[int] | None) -> tuple[PromptPlan, Any, Any]:
        """The prompt's plan, the token control and the answer's text stream."""
        if prompt is not None:  # raw: encoded as is; a checkpoint just before its last token
            tokens = self._prompt_tokens(prompt)
            if not tokens:
                raise UnsupportedRequest("the prompt is empty and this model has no "
                                         "beginning-of-text token to start from", param="prompt")
            budget = self.n_ctx - reply_reserve(self.n_ctx, opts.max_tokens)
            if len(tokens) > budget:
                raise ContextOverflow(len(tokens), budget)
            stable = len(tokens) - 1 if not self.cache.trimmable and len(tokens) > 1 else None
            control = (None if opts.logprobs is None else
                       TokenControl(token_bytes=self._token_bytes, top=opts.logprobs))
            return PromptPlan(tokens, (), False, 0, stable), control, TextStream()
        plan = plan_prompt(self, messages, opts)
        control = token_control(self, plan, opts)
        return plan, control, AnswerStream(in_thinking=plan.in_thinking,
                                           parser=call_parser(self, opts))

    def _answer(self, messages: tuple[Message, ...], opts: ChatOptions,
                prompt: str | Sequence[int] | None = None) -> Iterator[Chunk]:
        started = time.perf_counter()
        prepared, settled = self._prepared, self._settled
        self._prepared, self._settled = 0, False
        try:
            plan, control, out = self._setup(messages, opts, prompt)
        except Exception as exc:  # noqa: BLE001 - a request it cannot take ends with an error chunk
            yield Chunk.failed(exc, Stats(context_limit=self.n_ctx), prefix=f"{self.label} failed: ")
            return
        progress = Progress(plan, started, prepared, settled=settled)
        if prompt is None and opts.thinking and self.thinks:
            progress.thought = Thought(closing_tokens(self, CLOSING_LINE),
                                       opts.thinking_budget, self._end_thought)
        try:
            finish, last = yield from self._produce(plan, opts, progress, out, control)
        except Exception as exc:  # noqa: BLE001 - a failed answer ends with an error chunk
            self.cache.reset()  # stopped mid-computation: its state is unknown
            yield Chunk.failed(exc, self._stats(progress), prefix=f"{self.label} failed: ")
            return
        if finish in ("stop", "length"):
            self._feed_pending()
        last = last + out.flush()
        reason: StopReason = finish  # type: ignore[assignment]
        if finish == "length":
            capped = opts.max_tokens is not None and progress.generated >= max(opts.max_tokens, 0)
            reason = "cap" if capped else "context"
        elif finish == "stop" and getattr(out, "calls", None):
            finish = reason = "tool_calls"
        stats = replace(self._stats(progress), stop_reason=reason)
        yield Chunk(text=last.text, thinking=last.thinking, stats=stats,
                    finish_reason=finish,  # type: ignore[arg-type]
                    tool_calls=last.calls, logprobs=last.logprobs)
        if (prompt is None and finish in ("stop", "length", "tool_calls")
                and not self._cancel.is_set()):
            settle(self, plan, "".join(out.text), tuple(out.calls), opts, "".join(out.thinking))

    def _produce(self, plan: PromptPlan, opts: ChatOptions, progress: Progress, out: Any,
                 control: TokenControl | None) -> Generator[Chunk, None, tuple[str, Piece]]:
        """Reuse what the cache holds, evaluate the rest, run the token loop; yields the
        chunks before the last and returns the finish reason and the last piece."""
        tokens = plan.tokens
        max_new = self.n_ctx - len(tokens)
        if opts.max_tokens is not None:
            max_new = min(max_new, max(opts.max_tokens, 0))
        self._meter = progress.meter
        self._pending = []
        self._begin(merge_sampling(self.plan.sampling, opts, self.end_tokens), control)
        self._control = control
        if self.prompt_cache.prepare(self.cache, tokens, at_boundary=progress.settled):
            progress.prepared = 0  # another conversation's state: none prepared for it
        progress.kept = start = self.cache.prepare(tokens).keep
        if max_new <= 0:
            return "length", Piece()
        loop = None
        try:
            with self._batcher.member(self._seq):
                start = yield from self._read_prompt(plan, start, progress)
                loop = steps(self, tokens[start:], max_new=max_new, meter=progress.meter,
                             room=lambda: self.n_ctx - len(self.cache.tokens),
                             thought=progress.thought, pending=self._pending,
                             in_thinking=lambda: bool(getattr(out, "in_thinking", False)))
                for step in loop:
                    progress.generated += step.tokens
                    progress.rate.add(progress.generated)
                    if progress.ttft is None:
                        progress.ttft = time.perf_counter() - progress.started
                    piece = out.feed(step.text, step.logprob)
                    if step.finish is not None:
                        return step.finish, piece
                    if piece:
                        yield Chunk(text=piece.text, thinking=piece.thinking,
                                    tool_calls=piece.calls, logprobs=piece.logprobs,
                                    stats=self._stats(progress))
                    if self._cancel.is_set():
                        return "cancelled", Piece()
                    if piece.calls and not opts.parallel_tool_calls:
                        return "stop", Piece()  # one call was asked for: the answer ends with it
        except Cancelled:
            return "cancelled", Piece()
        finally:
            if loop is not None:
                loop.close()
        return ("cancelled" if self._cancel.is_set() else "stop"), Piece()

    def _read_prompt(self, plan: PromptPlan, start: int, progress: Progress
                     ) -> Generator[Chunk, None, int]:
        """Evaluate the prompt from `start` to before its last token (a piece also ends where
        a long system message does, parked, and at `plan.stable`, checkpointed); a long one
        piece by piece with a progress chunk first and after each; returns where it stopped."""
        tokens, shared, stable = plan.tokens, plan.shared, plan.stable
        end, at, began = len(tokens) - 1, start, time.perf_counter()
        piece = max(1, min(int(getattr(self.plan, "n_batch", 512) or 512), self.n_ctx))
        long = end - start + 1 > piece

        def report() -> Chunk:
            done = PromptProgress(at - start, len(tokens) - start, time.perf_counter() - began)
            return Chunk(stats=self._stats(progress), progress=done)

        if long:
            yield report()
        while at < end:
            marks = [m for m in (shared, stable) if m is not None and at < m <= end]
            stop = min([end] + marks + ([at + piece] if long else []))
            self.feed(tokens[at:stop])
            at = stop
            if at == shared:
                self.prompt_cache.park(self.cache.ops, tokens[:shared], shared=True)
            if at == stable:
                self.cache.save_checkpoint()
            if long:
                yield report()
        return at

    def _feed_pending(self) -> None:
        """Feed the last sampled token: counted, and cached for the next turn."""
        if not self._pending or len(self.cache.tokens) >= self.n_ctx:
            return
        last, self._pending[:] = list(self._pending), []
        try:
            self.feed(last)
        except (Cancelled, EngineError):
            pass

    def _threads_now(self) -> tuple[int, int, str]:
        """(CPU threads decoding now, the plan's count, why they moved); zeros: no such count."""
        return 0, 0, ""

    def _stats(self, progress: Progress) -> Stats:
        p_n, p_s, g_n, g_s = progress.meter.split()
        threads, full, note = self._threads_now()
        thought = progress.thought
        return Stats(prompt_tokens=p_n, prompt_seconds=p_s, generated_tokens=g_n,
                     decode_seconds=g_s, ttft_seconds=progress.ttft,
                     context_used=len(self.cache.tokens), context_limit=self.n_ctx,
                     dropped_messages=progress.plan.dropped, peak_memory_bytes=self._peak_memory(),
                     prompt_length=len(progress.plan.tokens), reused_tokens=progress.kept,
                     prepared_tokens=min(progress.prepared, progress.kept),
                     recent_tok_s=progress.rate.tok_s(), threads=threads, threads_full=full,
                     threads_note=note, thinking_tokens=thought.tokens if thought else 0,
                     thinking_end=thought.end if thought else "")

    # -- saved state (--continue) and the history --------------------------------------------

    def save_state(self, path: Path) -> int:
        """Write what the model's state holds beside a conversation; the bytes written."""
        return saved_state.save(self, Path(path))

    def load_state(self, path: Path) -> str | None:
        """Restore a state `save_state` wrote; None when it loaded, else a note saying why not."""
        return saved_state.load(self, Path(path))

    def render(self, messages: Sequence[Message], thinking: bool, *, generation: bool = True,
               options: ChatOptions | None = None) -> str:
        """The prompt text for `messages` as this model's template writes it (`render.render`)."""
        return render(self, messages, thinking, generation=generation, options=options)

    def history_tokens(self, messages: Sequence[Message], thinking: bool,
                       options: ChatOptions | None = None) -> list[int]:
        """The tokens every next prompt after `messages` starts with."""
        return history_tokens(self, messages, thinking, options)
