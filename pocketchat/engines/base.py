"""What every backend shares: the harness (busy lock, cancel, close) and one answer's skeleton.

One answer, step by step (`EngineBase._answer`):
1. the conversation is fitted into the window (`context.fit_messages`, oldest turns out) and
   rendered with the model's chat template (thinking on/off), then tokenized;
2. the prefix cache (`prefix_cache.PrefixCache`) keeps the longest part of the model's state
   the prompt shares with what it holds (cut back, or restored from a checkpoint);
3. for a state that cannot be cut back (recurrent layers), the prompt is evaluated up to the
   end of the last user message first and a checkpoint is taken there;
4. the backend evaluates the rest and samples (`_generate`), cancellable; text goes through
   `thinking.ThinkSplitter` into answer and thinking;
5. the final chunk carries the stats: the backend's own counters (`_timing`) plus the prompt's
   length, the tokens reused from the cache and the tokens evaluated;
6. after the final chunk (when the caller reads on, as the worker does), the engine evaluates
   the answer the way the template renders it in the history of the next prompt, so the next
   turn evaluates only its new message (`_settle`).

A backend implements only what differs: `_render`, `_encode`, `_begin`, `_evaluate`,
`_generate`, `_timing`, `_complete`, `_free`, and the state operations of its cache.
Errors during an answer end it with `Chunk.failed(exc, stats)`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generator, Iterator, Sequence

from pocketchat.errors import EngineError, PocketchatError
from pocketchat.engines.context import fit_messages, reply_reserve
from pocketchat.engines.prefix_cache import PrefixCache, common_prefix
from pocketchat.engines.thinking import ThinkSplitter
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Message, Stats

PROBES = ("A", "\n\n", " x", "1")  # next-message stand-ins: where the next prompt is sure to agree


class Cancelled(Exception):
    """Raised inside a backend's evaluation when cancel() was called."""


@dataclass(frozen=True)
class Step:
    """One sampled token's text; `finish` set on the last one ("stop" or "length")."""

    text: str = ""
    finish: str | None = None


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


@dataclass
class Progress:
    """One answer's figures as it goes (what its chunks' stats are made of)."""

    plan: PromptPlan
    started: float
    prepared: int  # tokens evaluated after the previous answer, for this one
    kept: int = 0  # tokens of the prompt reused from the cache
    ttft: float | None = None


class EngineBase:
    """The shared harness; see the module docstring for the hooks a backend implements."""

    info: EngineInfo
    n_ctx: int
    cache: PrefixCache
    label = "engine"  # error prefix: "llama.cpp failed: ..."
    close_timeout: float | None = None  # None: close() waits for an answer in flight

    def _init_harness(self) -> None:
        self._cancel = threading.Event()
        self._busy = threading.Lock()
        self._active = False
        self._closed = False
        self._prepared = 0  # tokens evaluated after the previous answer, for the next one
        self._settled = False  # the state ends where the next prompt goes on (see _settle)

    # -- Engine -----------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> Iterator[Chunk]:
        return self._chat(tuple(messages), options or ChatOptions())

    def cancel(self) -> None:
        if self._active:
            self._cancel.set()

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
        finally:
            if got:
                self._busy.release()

    # -- hooks ------------------------------------------------------------------------------

    def _render(self, messages: Sequence[Message], thinking: bool, *,
                generation: bool = True) -> str:
        raise NotImplementedError

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def _begin(self, opts: ChatOptions) -> None:
        """Start an answer: reset counters, seed, build the sampler."""

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

    def _chat(self, messages: tuple[Message, ...], opts: ChatOptions) -> Iterator[Chunk]:
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self._busy.acquire(blocking=False):
            raise EngineError("the engine is already answering; cancel that answer first")
        self._cancel.clear()
        self._active = True
        try:
            yield from self._answer(messages, opts)
        finally:
            self._active = False
            self._cancel.clear()
            self._busy.release()

    def _prompt(self, messages: tuple[Message, ...], opts: ChatOptions) -> PromptPlan:
        rendered: dict[tuple[Message, ...], tuple[str, list[int]]] = {}

        def count(ms: Sequence[Message]) -> int:
            key = tuple(ms)
            if key not in rendered:
                text = self._render(key, opts.thinking)
                rendered[key] = (text, self._encode(text))
            return len(rendered[key][1])

        budget = self.n_ctx - reply_reserve(self.n_ctx, opts.max_tokens)
        fitted = fit_messages(messages, count, budget)
        count(fitted.messages)
        text, tokens = rendered[fitted.messages]
        stable = None
        if not self.cache.trimmable:
            head = self._encode(self._render(fitted.messages, opts.thinking, generation=False))
            if 0 < len(head) < len(tokens) and tokens[: len(head)] == head:
                stable = len(head)
        return PromptPlan(tokens, fitted.messages, text.rstrip().endswith("<think>"),
                          fitted.dropped, stable)

    def _answer(self, messages: tuple[Message, ...], opts: ChatOptions) -> Iterator[Chunk]:
        started = time.perf_counter()
        prepared, self._prepared, self._settled = self._prepared, 0, False
        try:
            plan = self._prompt(messages, opts)
        except PocketchatError as exc:
            yield Chunk.failed(exc, Stats(context_limit=self.n_ctx))
            return
        progress = Progress(plan, started, prepared)
        splitter = ThinkSplitter(in_thinking=plan.in_thinking)
        answer_text: list[str] = []
        try:
            finish, pending = yield from self._produce(plan, opts, progress, splitter, answer_text)
        except Exception as exc:  # noqa: BLE001 - a failed answer ends with an error chunk
            self.cache.reset()  # stopped mid-computation: its state is unknown
            yield Chunk.failed(exc, self._stats(progress), prefix=f"{self.label} failed: ")
            return
        if finish in ("stop", "length"):
            self._complete()
        tail_a, tail_t = splitter.flush()
        yield Chunk(text=pending[0] + tail_a, thinking=pending[1] + tail_t,
                    stats=self._stats(progress), finish_reason=finish)  # type: ignore[arg-type]
        if finish in ("stop", "length") and not self._cancel.is_set():
            self._settle(plan.messages, "".join(answer_text) + tail_a, opts)

    def _produce(self, plan: PromptPlan, opts: ChatOptions, progress: Progress,
                 splitter: ThinkSplitter, answer_text: list[str]
                 ) -> Generator[Chunk, None, tuple[str, tuple[str, str]]]:
        """Reuse what the cache holds, evaluate the rest, sample; yields the chunks before the
        last and returns the finish reason and the last step's (answer, thinking)."""
        tokens = plan.tokens
        max_new = self.n_ctx - len(tokens)
        if opts.max_tokens is not None:
            max_new = min(max_new, max(opts.max_tokens, 0))
        gen = None
        try:
            self._begin(opts)
            progress.kept = start = self.cache.prepare(tokens).keep
            if max_new <= 0:
                return "length", ("", "")
            if plan.stable is not None and plan.stable > start:
                self._evaluate(tokens[start: plan.stable])
                self.cache.save_checkpoint()
                start = plan.stable
            gen = self._generate(tokens[start:], opts, max_new)
            for step in gen:
                if progress.ttft is None:
                    progress.ttft = time.perf_counter() - progress.started
                answer, thinking = splitter.feed(step.text)
                answer_text.append(answer)
                if step.finish is not None:
                    return step.finish, (answer, thinking)
                if answer or thinking:
                    yield Chunk(text=answer, thinking=thinking, stats=self._stats(progress))
                if self._cancel.is_set():
                    return "cancelled", ("", "")
            return ("cancelled" if self._cancel.is_set() else "stop"), ("", "")
        except Cancelled:
            return "cancelled", ("", "")
        finally:
            if gen is not None:
                gen.close()

    def _stats(self, progress: Progress) -> Stats:
        t, plan = self._timing(), progress.plan
        return Stats(prompt_tokens=t.prompt_tokens, prompt_seconds=t.prompt_seconds,
                     generated_tokens=t.generated_tokens, decode_seconds=t.decode_seconds,
                     ttft_seconds=progress.ttft, context_used=len(self.cache.tokens),
                     context_limit=self.n_ctx, dropped_messages=plan.dropped,
                     peak_memory_bytes=t.peak_memory_bytes, prompt_length=len(plan.tokens),
                     reused_tokens=progress.kept,
                     prepared_tokens=min(progress.prepared, progress.kept))

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

    def history_tokens(self, messages: Sequence[Message], thinking: bool) -> list[int]:
        """The tokens every next prompt after `messages` starts with: the conversation as the
        template renders it in the history, up to where the next user message's text goes."""
        shared: list[int] | None = None
        for probe in PROBES:
            toks = self._encode(self._render((*messages, Message("user", probe)), thinking,
                                             generation=False))
            shared = toks if shared is None else shared[: common_prefix(shared, toks)]
        return shared or []

    def _settle(self, messages: tuple[Message, ...], answer: str, opts: ChatOptions) -> None:
        """Evaluate the answer as the next prompt will hold it (errors only cost the reuse)."""
        if not answer or self._closed:
            return
        try:
            history = self.history_tokens((*messages, Message("assistant", answer)), opts.thinking)
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

