"""What every backend shares: the harness (busy lock, cancel, close) and one answer's skeleton.

One answer, step by step (`EngineBase._answer`):
1. the conversation is fitted into the window (`context.fit_messages`, oldest turns out) and
   rendered with the model's chat template (thinking on/off), then tokenized;
2. the prefix cache (`prefix_cache.PrefixCache`) keeps the longest part of the model's state
   the prompt shares with what it holds (cut back, or restored from a checkpoint); before
   that, the prompt cache across conversations (`prompt_cache.PromptCache`) parks the live
   state if the prompt leaves it, and brings back a parked one when it gives more of the
   prompt; a long first system message is parked once the prompt is evaluated past it;
3. for a state that cannot be cut back (recurrent layers), the prompt is evaluated up to the
   end of the last user message first and a checkpoint is taken there;
4. a prompt longer than one piece (`_prompt_piece`: the plan's n_batch) is evaluated piece by piece,
   with a `Chunk.progress` (done / total, seconds) first and after each piece (`_read_prompt`);
   then the backend evaluates the rest and samples (`_generate`), cancellable; text goes through
   `thinking.ThinkSplitter` into answer and thinking;
5. the final chunk carries the stats: the backend's own counters (`_timing`) plus the prompt's
   length, the tokens reused from the cache and the tokens evaluated;
6. after the final chunk (when the caller reads on, as the worker does), the engine evaluates
   the answer the way the template renders it in the history of the next prompt, so the next
   turn evaluates only its new message (`_settle`).

The base owns every decision both backends share: the constructor's prologue (`__init__`:
progress, harness, then the backend's `_load`), the request's sampling merged with the plan's
defaults (`merge_sampling`, once), the conversation as the template receives it (tools, tool
results, reasoning, template kwargs, a prefilled assistant turn; `_render`), the thinking policy
(`template.thinking_prompt`), the constraint and logprobs of the answer (`constrain/`), tool
calls parsed from the answer (`answer.AnswerStream`), why the answer stopped
(`Stats.stop_reason`) and the classification of load errors (`load_error`).

A raw prompt (`complete`, the legacy completions endpoint) takes steps 2, 4 and 5 only: the
text encoded as is (`_prompt_tokens`: the beginning-of-text token as the model wants it), no
template, no reasoning split, no tools, no settling.

A backend implements only what differs: `_load`, `_apply_template`, `_encode`, `_begin`,
`_evaluate`, `_generate`, `_timing`, `_complete`, `_free`, `_ll_tokenizer` (llguidance's view
of its vocabulary), `_token_bytes`, and the state operations of its cache.
Errors during an answer end it with `Chunk.failed(exc, stats)`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Sequence

from pocketchat.errors import (
    ContextOverflow,
    CorruptModel,
    EngineError,
    ModelTooLarge,
    PocketchatError,
    UnsupportedRequest,
)
from pocketchat.engines.answer import AnswerStream, Piece, TextStream
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.constrain.grammar import checked_grammar, forced_tools, offered_tools
from pocketchat.engines.constrain.toolcalls import ToolCallParser, call_format
from pocketchat.engines.constrain.tools import knows_tools, template_messages
from pocketchat.engines.context import fit_messages, reply_reserve
from pocketchat.engines.prefix_cache import PrefixCache, common_prefix
from pocketchat.engines.prompt_cache import PromptCache
from pocketchat.engines.rate import RecentRate
from pocketchat.engines.slots import Batcher, StepCancelled, Work
from pocketchat.engines.template import thinking_prompt
from pocketchat.engines.thinking import CLOSE_TAG, OPEN_TAG
from pocketchat.engines.types import (
    ChatOptions,
    Chunk,
    EngineInfo,
    Message,
    PromptProgress,
    Stats,
    StopReason,
    TokenLogprob,
)
from pocketchat.types import LoadPlan

PROBES = ("A", "\n\n", " x", "1")  # next-message stand-ins: where the next prompt is sure to agree
PRESERVE_THINKING = "preserve_thinking"  # the template kwarg that keeps every turn's reasoning
PREFILL_MARK = "\u2063pocketchat-prefill\u2063"  # where a prefilled assistant turn's text ends
ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling of one answer: the request's fields over the plan's defaults."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def merge_sampling(defaults: Any, opts: ChatOptions) -> SamplingSettings:
    """The one place request options meet the plan's sampling defaults (None: the default)."""

    def pick(name: str, fallback: float) -> Any:
        value = getattr(opts, name, None)
        return getattr(defaults, name, fallback) if value is None else value

    return SamplingSettings(
        temperature=float(pick("temperature", 0.6)), top_p=float(pick("top_p", 0.95)),
        top_k=int(pick("top_k", 20)), min_p=float(pick("min_p", 0.0)),
        repeat_penalty=float(pick("repeat_penalty", 1.0)),
        presence_penalty=float(pick("presence_penalty", 0.0)),
        frequency_penalty=float(pick("frequency_penalty", 0.0)),
        seed=opts.seed, logit_bias=tuple(opts.logit_bias),
    )


def load_error(backend: str, name: str, why: str, exc: BaseException | None = None
               ) -> PocketchatError:
    """The one classifier of a failed load: memory, an architecture the runtime does not know,
    custom model code, or (the rest) a file the runtime could not read."""
    low = why.lower()
    if (isinstance(exc, MemoryError) or "out of memory" in low or "failed to allocate" in low
            or "unable to allocate" in low):
        return ModelTooLarge(f"not enough memory to load {name}: {why}",
                             hint="Pick a smaller build, a smaller --ctx, or close other programs.")
    if "unknown model architecture" in low or ("not supported" in low and "model type" in low):
        update = ("Update llama-cpp-python to a version that knows this architecture."
                  if backend == "llama.cpp" else
                  "Update mlx-lm (pip install -U mlx-lm), or use a GGUF build.")
        return EngineError(f"this {backend} cannot run {name}: {why}", hint=update)
    if "trust_remote_code" in low:
        return EngineError(f"{name} needs custom model code, which pocketchat does not run: {why}")
    if backend == "mlx":
        return CorruptModel(f"{name} is not a loadable MLX model: {why}")
    return EngineError(
        f"llama.cpp could not load {name}: {why}",
        hint="Run with POCKETCHAT_DEBUG=1 for llama.cpp's log; try another build if it persists.",
    )


class Cancelled(Exception):
    """Raised inside a backend's evaluation when cancel() was called."""


@dataclass(frozen=True)
class Step:
    """One sampled token's text; `finish` set on the last one ("stop" or "length");
    `logprob` when the answer asked for logprobs."""

    text: str = ""
    finish: str | None = None
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class Timing:
    """The backend's own counters for this answer."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    peak_memory_bytes: int | None = None


@dataclass(frozen=True)
class PromptPlan:
    tokens: list[int]
    messages: tuple[Message, ...]
    in_thinking: bool
    dropped: int
    stable: int | None  # where the conversation ends before the generation prompt
    prefill: Message | None = None  # a trailing assistant turn the answer continues
    shared: int | None = None  # where a long first system message ends (a shared prefix)


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


class EngineBase:
    """The shared harness; see the module docstring for the hooks a backend implements."""

    info: EngineInfo
    n_ctx: int
    cache: PrefixCache
    plan: LoadPlan
    label = "engine"  # error prefix: "llama.cpp failed: ..."
    _batcher: Batcher | None = None  # with a plan's `parallel` N > 1: the steps of the context
    _seq = 0  # this engine's sequence of the context
    close_timeout: float | None = None  # None: close() waits for an answer in flight
    # What the chat template says about itself (set by `_load`).
    template_source: str = ""
    knows_thinking_switch: bool = False
    mentions_think: bool = False

    def __init__(self, plan: LoadPlan, path: Path, *, name: str | None = None,
                 on_progress: ProgressFn | None = None) -> None:
        """Check and load the model at `path` as `plan` says; returns when it is ready;
        `on_progress(stage, fraction)` reports the stages."""
        path = Path(path)
        self.plan = plan
        if on_progress:
            on_progress("checking", 0.0)
        self._init_harness()
        self._ll_tok: Any = None
        self.info = self._load(path, name, on_progress)
        self.prompt_cache = self._prompt_cache()
        if on_progress:
            on_progress("ready", 1.0)

    def _load(self, path: Path, name: str | None, on_progress: ProgressFn | None) -> EngineInfo:
        """Load the model, set n_ctx, cache and the template's traits; what is running."""
        raise NotImplementedError

    def _prompt_cache(self) -> PromptCache:
        """The cache across conversations, within the plan's budget (off where the backend
        cannot copy a whole sequence state)."""
        budget = int(getattr(self.plan, "prompt_cache_bytes", 0) or 0)
        if not hasattr(self.cache.ops, "save_seq"):
            return PromptCache(0, note="this backend cannot copy its sequence state: no "
                                       "prompt cache across conversations")
        return PromptCache(budget)

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
        self._settled = False  # the state ends where the next prompt goes on (see _settle)

    def _feed_batched(self, tokens: Sequence[int], sample: Callable[[int], Any] | None) -> Any:
        """Decode `tokens` after `cache.tokens` in the batcher's steps (`slots.Batcher`, with a
        plan's `parallel` N > 1), keeping `cache.tokens` what the context holds; the result of
        `sample(batch_index)` on the last token. A cancel keeps the decoded part and raises
        Cancelled; a failed step's part is dropped."""
        cache = self.cache
        work = Work(self._seq, list(tokens), len(cache.tokens), sample=sample,
                    cancel=self._cancel)
        try:
            result = self._batcher.decode(work)  # type: ignore[union-attr]
        except StepCancelled:
            cache.tokens.extend(work.tokens[: work.done])
            raise Cancelled from None
        except BaseException:
            base = len(cache.tokens)
            cache.tokens.extend(work.tokens[: work.done])
            cache.truncate(base + work.done)  # drop what the failed step left
            raise
        cache.tokens.extend(work.tokens)
        return result

    # -- Engine -----------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> Iterator[Chunk]:
        return self._chat(tuple(messages), options or ChatOptions())

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> Iterator[Chunk]:
        """Stream the continuation of `prompt` (text, or token ids) as raw text (the legacy
        completions endpoint): no chat template, no reasoning split, no tools; the last chunk
        carries finish_reason."""
        return self._chat((), options or ChatOptions(), prompt=prompt)

    def cancel(self) -> None:
        if self._active:
            self._cancel.set()

    def end_thinking(self) -> None:
        """End the thought in flight now; the answer follows (see `types.Engine`)."""
        if self._active:
            self._end_thought.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel.set()
        if self.close_timeout is None:
            got = self._busy.acquire()
        else:
            got = self._busy.acquire(timeout=self.close_timeout)
        try:
            self._free()
            self.prompt_cache.clear()
        finally:
            if got:
                self._busy.release()

    # -- hooks ------------------------------------------------------------------------------

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        """The chat template's text for message dicts (kwargs: tools, enable_thinking, ...)."""
        raise NotImplementedError

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def _prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A raw prompt's tokens: text encoded with the beginning-of-text token when the model
        wants one, token ids as given (UnsupportedRequest for ids outside the vocabulary)."""
        return self._encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]

    def _begin(self, sampling: SamplingSettings, control: TokenControl | None) -> None:
        """Start an answer: reset counters, seed, build the sampler; `control` (the mask and
        logprobs, or None) is applied to each token's logits before sampling."""

    def _ll_tokenizer(self) -> Any:
        """llguidance's tokenizer for this vocabulary (built once, when first needed)."""
        raise NotImplementedError

    def _token_bytes(self, token: int) -> bytes:
        """What a token adds to the text, as bytes."""
        raise NotImplementedError

    def _evaluate(self, tokens: list[int]) -> None:
        """Evaluate `tokens` into the state (no sampling), extending `cache.tokens`;
        raise `Cancelled` when cancel() is called."""
        raise NotImplementedError

    def _generate(self, tokens: list[int], opts: ChatOptions, max_new: int) -> Iterator[Step]:
        """Evaluate the rest of the prompt, then sample up to `max_new` tokens."""
        raise NotImplementedError

    def _timing(self) -> Timing:
        raise NotImplementedError

    def _complete(self) -> None:
        """The answer ended with stop/length: finish the state (e.g. evaluate the last token)."""

    def _free(self) -> None:
        raise NotImplementedError

    # -- one answer -------------------------------------------------------------------------

    def _chat(self, messages: tuple[Message, ...], opts: ChatOptions, *,
              prompt: str | Sequence[int] | None = None) -> Iterator[Chunk]:
        """One answer under the busy lock. The lock is let go before the final chunk is
        handed over (the answer is over for the caller, whatever it does with this iterator
        after), and taken again, if still free, only to settle the state when the caller reads
        on; closing the iterator, or an error anywhere, lets it go too."""
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self._busy.acquire(blocking=False):
            raise EngineError("the engine is already answering; cancel that answer first")
        held = True
        inner = None
        try:
            self._cancel.clear()
            self._active = True
            inner = (self._answer(messages, opts) if prompt is None
                     else self._continue_text(prompt, opts))
            for chunk in inner:
                if chunk.finish_reason is None:
                    yield chunk
                    continue
                held = self._let_go()
                yield chunk
                if self._closed or not self._busy.acquire(blocking=False):
                    return  # another answer took the engine: this one's settling is skipped
                held = True
                self._active = True
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

    def _render(self, messages: Sequence[Message], thinking: bool, *, generation: bool = True,
                options: ChatOptions | None = None) -> str:
        """The prompt text for `messages`: tools offered by `options` (or the fallback section
        for a template without tools), thinking on or off, the template's kwargs; with
        `generation`, the assistant's generation prompt, or the continuation of a trailing
        assistant message (rendered without its end of turn)."""
        opts = options or ChatOptions(thinking=thinking)
        tools = offered_tools(opts)
        kwargs: dict[str, Any] = dict(opts.template_kwargs or {})
        kwargs["enable_thinking"] = thinking
        aware = knows_tools(self.template_source)
        if tools and aware:
            kwargs["tools"] = [dict(t) for t in tools]
        messages = tuple(messages)
        if generation and messages and messages[-1].role == "assistant":
            last = messages[-1]
            marked = (*messages[:-1], replace(last, content=last.content + PREFILL_MARK))
            text = self._apply_template(template_messages(marked, tools, aware=aware),
                                        generation=False, **kwargs)
            at = text.rfind(PREFILL_MARK)
            if at >= 0:
                return text[:at]
            head = self._render(messages[:-1], thinking, options=opts)  # a template that drops it
            return head + last.content
        text = self._apply_template(template_messages(messages, tools, aware=aware),
                                    generation=generation, **kwargs)
        if generation:
            text = thinking_prompt(text, thinking=thinking, knows_switch=self.knows_thinking_switch,
                                   mentions_think=self.mentions_think)
        return text

    def _prompt(self, messages: tuple[Message, ...], opts: ChatOptions) -> PromptPlan:
        rendered: dict[tuple[Message, ...], tuple[str, list[int]]] = {}

        def count(ms: Sequence[Message]) -> int:
            key = tuple(ms)
            if key not in rendered:
                text = self._render(key, opts.thinking, options=opts)
                rendered[key] = (text, self._encode(text))
            return len(rendered[key][1])

        budget = self.n_ctx - reply_reserve(self.n_ctx, opts.max_tokens)
        fitted = fit_messages(messages, count, budget)
        count(fitted.messages)
        text, tokens = rendered[fitted.messages]
        prefill = fitted.messages[-1] if fitted.messages[-1].role == "assistant" else None
        before = fitted.messages[:-1] if prefill is not None else fitted.messages
        stable = None
        if not self.cache.trimmable:
            head = self._encode(self._render(before, opts.thinking, generation=False,
                                             options=opts))
            if 0 < len(head) < len(tokens) and tokens[: len(head)] == head:
                stable = len(head)
        if prefill is None:
            in_thinking = text.rstrip().endswith(OPEN_TAG)
        else:  # the prefill may have opened the reasoning without closing it
            in_thinking = text.rfind(OPEN_TAG) > text.rfind(CLOSE_TAG)
        return PromptPlan(tokens, fitted.messages, in_thinking, fitted.dropped, stable, prefill,
                          self._shared_end(fitted.messages, tokens, opts))

    def _shared_end(self, messages: tuple[Message, ...], tokens: list[int], opts: ChatOptions
                    ) -> int | None:
        """Where a first system message (with the tools the template puts beside it) ends in
        `tokens`, when the prompt cache is on and it is at least `min_shared` tokens long."""
        pc = self.prompt_cache
        if not pc.enabled or len(messages) < 2 or messages[0].role != "system":
            return None
        key = repr((messages[0], opts.thinking, opts.tools, opts.template_kwargs))
        memo = getattr(self, "_shared_memo", None)
        if memo is not None and memo[0] == key:
            head = memo[1]
        else:
            try:  # a template may refuse a conversation without a user message
                head = self._encode(self._render(messages[:1], opts.thinking, generation=False,
                                                 options=opts))
            except Exception:  # noqa: BLE001 - then no shared prefix is kept
                head = []
            self._shared_memo = (key, head)  # the same system message turn after turn
        if pc.min_shared <= len(head) < len(tokens) and tokens[: len(head)] == head:
            return len(head)
        return None

    def _token_control(self, plan: PromptPlan, opts: ChatOptions) -> TokenControl | None:
        """The answer's mask and logprobs, or None (nothing to do per token); raises
        UnsupportedRequest for a constraint that cannot be enforced."""
        grammar = None
        fmt = call_format(self.template_source) if knows_tools(self.template_source) else "json"
        needs = (opts.response_format and opts.response_format.get("type") not in (None, "text")
                 ) or (opts.tools and opts.tool_choice not in ("auto", "none"))
        tokenizer = self._ll_tokenizer() if needs else None
        if needs:
            grammar = checked_grammar(opts, fmt, tokenizer)
        if grammar is None and opts.logprobs is None:
            return None
        control = TokenControl(token_bytes=self._token_bytes, tokenizer=tokenizer,
                               grammar=grammar, top=opts.logprobs, in_thinking=plan.in_thinking,
                               may_think=opts.thinking and self.mentions_think
                               and plan.prefill is None)
        if plan.prefill is not None and not control.consume_prefill(plan.prefill.content):
            raise UnsupportedRequest("the prefilled assistant message does not fit the requested "
                                     "format", param="messages")
        return control

    def _answer(self, messages: tuple[Message, ...], opts: ChatOptions) -> Iterator[Chunk]:
        started = time.perf_counter()
        prepared, settled = self._prepared, self._settled
        self._prepared, self._settled = 0, False
        try:
            plan = self._prompt(messages, opts)
            control = self._token_control(plan, opts)
        except Exception as exc:  # noqa: BLE001 - a request it cannot take ends with an error chunk
            yield Chunk.failed(exc, Stats(context_limit=self.n_ctx), prefix=f"{self.label} failed: ")
            return
        progress = Progress(plan, started, prepared, settled=settled)
        tools = offered_tools(opts)
        parser = None
        if tools:
            fmt = call_format(self.template_source) if knows_tools(self.template_source) else "json"
            parser = ToolCallParser(fmt, tools, forced=forced_tools(opts) is not None)
        out = AnswerStream(in_thinking=plan.in_thinking, parser=parser)
        counted = [0]
        try:
            finish, last = yield from self._produce(plan, opts, progress, out, control, counted)
        except Exception as exc:  # noqa: BLE001 - a failed answer ends with an error chunk
            self.cache.reset()  # stopped mid-computation: its state is unknown
            yield Chunk.failed(exc, self._stats(progress), prefix=f"{self.label} failed: ")
            return
        if finish in ("stop", "length"):
            self._complete()
        last = last + out.flush()
        reason: StopReason = finish  # type: ignore[assignment]
        if finish == "length":
            capped = opts.max_tokens is not None and counted[0] >= max(opts.max_tokens, 0)
            reason = "cap" if capped else "context"
        elif finish == "stop" and out.calls:
            finish = reason = "tool_calls"
        stats = replace(self._stats(progress), stop_reason=reason)
        yield Chunk(text=last.text, thinking=last.thinking, stats=stats,
                    finish_reason=finish,  # type: ignore[arg-type]
                    tool_calls=last.calls, logprobs=last.logprobs)
        if finish in ("stop", "length", "tool_calls") and not self._cancel.is_set():
            self._settle(plan, "".join(out.text), tuple(out.calls), opts, "".join(out.thinking))

    def _continue_text(self, prompt: str | Sequence[int], opts: ChatOptions) -> Iterator[Chunk]:
        """One raw continuation (`complete`): the prompt encoded as is, the cache reused, the
        tokens sampled (logprobs when asked), the stats; the state is not settled after it."""
        started = time.perf_counter()
        prepared, settled = self._prepared, self._settled
        self._prepared, self._settled = 0, False
        try:
            tokens = self._prompt_tokens(prompt)
            if not tokens:
                raise UnsupportedRequest("the prompt is empty and this model has no "
                                         "beginning-of-text token to start from", param="prompt")
            budget = self.n_ctx - reply_reserve(self.n_ctx, opts.max_tokens)
            if len(tokens) > budget:
                raise ContextOverflow(len(tokens), budget)
        except Exception as exc:  # noqa: BLE001 - a request it cannot take ends with an error chunk
            yield Chunk.failed(exc, Stats(context_limit=self.n_ctx), prefix=f"{self.label} failed: ")
            return
        # A state that cannot be cut back keeps a checkpoint just before the last prompt token,
        # so the same prompt (or a longer one) is reused by the next request.
        stable = len(tokens) - 1 if not self.cache.trimmable and len(tokens) > 1 else None
        plan = PromptPlan(tokens, (), in_thinking=False, dropped=0, stable=stable)
        control = None
        if opts.logprobs is not None:
            control = TokenControl(token_bytes=self._token_bytes, top=opts.logprobs)
        progress = Progress(plan, started, prepared, settled=settled)
        out = TextStream()
        counted = [0]
        try:
            finish, last = yield from self._produce(plan, opts, progress, out,  # type: ignore[arg-type]
                                                    control, counted)
        except Exception as exc:  # noqa: BLE001 - a failed answer ends with an error chunk
            self.cache.reset()
            yield Chunk.failed(exc, self._stats(progress), prefix=f"{self.label} failed: ")
            return
        if finish in ("stop", "length"):
            self._complete()
        reason: StopReason = finish  # type: ignore[assignment]
        if finish == "length":
            capped = opts.max_tokens is not None and counted[0] >= max(opts.max_tokens, 0)
            reason = "cap" if capped else "context"
        stats = replace(self._stats(progress), stop_reason=reason)
        yield Chunk(text=last.text, stats=stats, finish_reason=finish,  # type: ignore[arg-type]
                    logprobs=last.logprobs)

    def _produce(self, plan: PromptPlan, opts: ChatOptions, progress: Progress,
                 out: AnswerStream, control: TokenControl | None, counted: list[int]
                 ) -> Generator[Chunk, None, tuple[str, Piece]]:
        """Reuse what the cache holds, evaluate the rest, sample; yields the chunks before the
        last and returns the finish reason and the last step's piece of the answer."""
        tokens = plan.tokens
        max_new = self.n_ctx - len(tokens)
        if opts.max_tokens is not None:
            max_new = min(max_new, max(opts.max_tokens, 0))
        gen = None
        try:
            self._begin(merge_sampling(self.plan.sampling, opts), control)
            if self.prompt_cache.prepare(self.cache, tokens, at_boundary=progress.settled):
                progress.prepared = 0  # another conversation's state: none prepared for it
            progress.kept = start = self.cache.prepare(tokens).keep
            if max_new <= 0:
                return "length", Piece()
            if len(tokens) - start > self._prompt_piece():  # long: read in pieces, progress between
                start = yield from self._read_prompt(plan, start, progress)
            if plan.shared is not None and plan.shared > start:  # a long system message
                self._evaluate(tokens[start: plan.shared])
                self._park_shared(plan)
                start = plan.shared
            if plan.stable is not None and plan.stable > start:
                self._evaluate(tokens[start: plan.stable])
                self.cache.save_checkpoint()
                start = plan.stable
            gen = self._generate(tokens[start:], opts, max_new)
            for step in gen:
                counted[0] += 1
                progress.rate.add(counted[0])
                if progress.ttft is None:
                    progress.ttft = time.perf_counter() - progress.started
                piece = out.feed(step.text, step.logprob)
                if step.finish is not None:
                    return step.finish, piece
                if piece:
                    yield Chunk(text=piece.text, thinking=piece.thinking, tool_calls=piece.calls,
                                logprobs=piece.logprobs, stats=self._stats(progress))
                if self._cancel.is_set():
                    return "cancelled", Piece()
                if piece.calls and not opts.parallel_tool_calls:
                    return "stop", Piece()  # one call was asked for: the answer ends with it
            return ("cancelled" if self._cancel.is_set() else "stop"), Piece()
        except Cancelled:
            return "cancelled", Piece()
        finally:
            if gen is not None:
                gen.close()

    def _park_shared(self, plan: PromptPlan) -> None:
        """The state now ends where a long system message does: keep a copy for other chats."""
        assert plan.shared is not None
        self.prompt_cache.park(self.cache.ops, plan.tokens[: plan.shared], shared=True)

    def _prompt_piece(self) -> int:
        """How many prompt tokens are evaluated between two progress chunks (llama.cpp's batch)."""
        return max(1, min(int(getattr(self.plan, "n_batch", 512) or 512), self.n_ctx))

    def _read_prompt(self, plan: PromptPlan, start: int, progress: Progress
                     ) -> Generator[Chunk, None, int]:
        """Evaluate the prompt from `start` to before its last token one piece at a time (a
        piece also ends where a long system message does, parked, and at `plan.stable`,
        checkpointed), yielding a progress chunk first and after each piece; returns where the
        rest of the prompt starts."""
        tokens, piece, stable, shared = plan.tokens, self._prompt_piece(), plan.stable, plan.shared
        end, at, began = len(tokens) - 1, start, time.perf_counter()
        total = len(tokens) - start

        def report() -> Chunk:
            done = PromptProgress(at - start, total, time.perf_counter() - began)
            return Chunk(stats=self._stats(progress), progress=done)

        yield report()
        while at < end:
            stop = min([at + piece, end] + [m for m in (shared, stable)
                                            if m is not None and at < m < at + piece])
            self._evaluate(tokens[at:stop])
            at = stop
            if at == shared:
                self._park_shared(plan)
            if at == stable:
                self.cache.save_checkpoint()
            if self._cancel.is_set():
                raise Cancelled
            yield report()
        return at

    def _threads_now(self) -> tuple[int, int, str]:
        """(CPU threads decoding now, the plan's count, why they moved); zeros: no such count."""
        return 0, 0, ""

    def _stats(self, progress: Progress) -> Stats:
        t, plan = self._timing(), progress.plan
        threads, full, note = self._threads_now()
        return Stats(prompt_tokens=t.prompt_tokens, prompt_seconds=t.prompt_seconds,
                     generated_tokens=t.generated_tokens, decode_seconds=t.decode_seconds,
                     ttft_seconds=progress.ttft, context_used=len(self.cache.tokens),
                     context_limit=self.n_ctx, dropped_messages=plan.dropped,
                     peak_memory_bytes=t.peak_memory_bytes, prompt_length=len(plan.tokens),
                     reused_tokens=progress.kept,
                     prepared_tokens=min(progress.prepared, progress.kept),
                     recent_tok_s=progress.rate.tok_s(), threads=threads, threads_full=full,
                     threads_note=note)

    # -- saved state (--continue) ----------------------------------------------------------

    def _state_key(self) -> dict:
        from pocketchat.engines.saved_state import state_key

        plan = getattr(self, "plan", None)
        return state_key(self.info.path, self.info.backend, self.n_ctx,
                         getattr(plan, "kv_type", "") or "")

    def save_state(self, path: Path) -> int:
        """Write what the model's state holds beside a conversation; the bytes written
        (0: nothing to save, or too large). A state that cannot be cut back and does not end
        where the next prompt goes on (an answer stopped, or all reasoning) is first brought
        back to its newest checkpoint, the end of the last user message."""
        from pocketchat.engines import saved_state

        path = Path(path)
        with self._idle():
            saved_state.remove(path)  # no key beside a half-written file: never loaded
            newest = self.cache.checkpoint_tokens
            if (not self._settled and newest and not self.cache.trimmable
                    and self.cache.tokens[: len(newest)] == newest):
                self.cache.truncate(len(newest))
            if not self.cache.tokens:
                return 0
            written = self._save_file(path, saved_state.MAX_STATE_BYTES)
            if written:
                saved_state.write_meta(path, self._state_key(), len(self.cache.tokens))
                saved_state.make_private(path)  # it holds the conversation, as its JSON does
            else:
                saved_state.remove(path)
            return written

    def load_state(self, path: Path) -> str | None:
        """Restore a state `save_state` wrote; None when it loaded, else a note saying why not."""
        from pocketchat.engines import saved_state

        path = Path(path)
        with self._idle():
            if not path.exists():
                return "no saved model state"
            why = saved_state.check_meta(path, self._state_key())
            if why is not None:
                return why
            self.cache.reset()
            tokens = self._load_file(path)
            if tokens is None:
                self.cache.reset()
                return "the saved model state did not load; the conversation is processed again"
            self.cache.tokens = tokens
            return None

    @contextmanager
    def _idle(self) -> Iterator[None]:
        """Hold the engine between answers (state files are written under the busy lock)."""
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self._busy.acquire(blocking=False):
            raise EngineError("the engine is answering; save or load its state after the answer")
        try:
            yield
        finally:
            self._busy.release()

    def _save_file(self, path: Path, limit: int) -> int:
        return 0

    def _load_file(self, path: Path) -> list[int] | None:
        return None

    # -- after the answer -------------------------------------------------------------------

    def history_tokens(self, messages: Sequence[Message], thinking: bool,
                       options: ChatOptions | None = None) -> list[int]:
        """The tokens every next prompt after `messages` starts with: the conversation as the
        template renders it in the history, up to where the next user message's text goes."""
        shared: list[int] | None = None
        for probe in PROBES:
            toks = self._encode(self._render((*messages, Message("user", probe)), thinking,
                                             generation=False, options=options))
            shared = toks if shared is None else shared[: common_prefix(shared, toks)]
        return shared or []

    def _settle(self, plan: PromptPlan, answer: str, calls: tuple, opts: ChatOptions,
                thinking: str = "") -> None:
        """Evaluate the answer as the next prompt will hold it (errors only cost the reuse).
        Its reasoning goes with it when the request keeps reasoning in the history
        (`preserve_thinking`: the caller sends it back as `reasoning_content`)."""
        reasoning = thinking if (opts.template_kwargs or {}).get(PRESERVE_THINKING) else ""
        if not (answer or calls or reasoning) or self._closed:
            return
        messages = plan.messages
        if plan.prefill is not None:  # the answer continues the prefilled turn
            messages, answer = messages[:-1], plan.prefill.content + answer
        try:
            turn = Message("assistant", answer, tool_calls=calls, reasoning=reasoning or None)
            history = self.history_tokens((*messages, turn), opts.thinking, opts)
            if not history or len(history) >= self.n_ctx - 1:
                return
            reuse = self.cache.prepare(history, leave=0)
            if reuse.keep < len(history):
                self._evaluate(history[reuse.keep:])
            self._prepared = len(history) - reuse.keep
            self._settled = True
        except Cancelled:
            self._prepared = 0  # _evaluate left the state consistent with cache.tokens
        except Exception:  # noqa: BLE001 - a cache that cannot settle is reset
            self.cache.reset()
            self._prepared = 0

