"""What every backend shares: the harness (busy lock, cancel, close, feeding the sequence)
and the hooks of its runtime; one answer's recipe is `answering.answer`.

A backend implements its runtime: `_load`, `_apply_template`, `_encode`, `_prompt_tokens`,
`_begin` (the sampler), `_run_step` (decode a step's parts: `batcher.Part`), `_sample_at` (the
next token at a batch index), `_piece` (a token's bytes), `end_tokens`, `_ll_tokenizer`,
`_token_bytes`, `_free`, and its state operations (`cache`, `_save_file`, `_load_file`). Its
sequences are fed through one `batcher.Batcher` (`solo` for a context of one sequence); the
token loop (`loop.steps`) and everything after it are the same for every backend.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import EngineClosed, EngineError
from pocketchat.engines.answer import run as answering
from pocketchat.engines.state import saved_state
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.draft import drafting
from pocketchat.engines.answer.loop import Cancelled, Meter, Step
from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.state.prompt_cache import for_engine
from pocketchat.engines.answer.render import history_tokens, render
from pocketchat.engines.answer.sampling import SamplingSettings
from pocketchat.engines.batch.batcher import Batcher, StepAborted, StepCancelled, Work
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Message
from pocketchat.types import LoadPlan

ProgressFn = Callable[[str, float], None]
__all__ = ["Cancelled", "EngineBase", "SamplingSettings", "Step"]  # what backends import


class EngineBase:
    """The shared harness; see the module docstring for what a backend implements."""

    info: EngineInfo
    n_ctx: int
    cache: PrefixCache
    plan: LoadPlan
    label = "engine"  # error prefix: "llama.cpp failed: ..."
    batcher: Batcher
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
        self.prompt_cache = for_engine(self.cache.ops, plan, saved_state.engine_key(self))
        if on_progress:
            on_progress("ready", 1.0)

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
        self._drafting: Any = None  # draft.drafting.Drafting, for a backend that verifies drafts
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
            batcher = getattr(self, "batcher", None)
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
        """Decode one step's parts (`batcher.Part`); the runtime's code (0: done, 2: aborted)."""
        raise NotImplementedError

    def _sample_at(self, index: int) -> tuple[int, Any]:
        """The next (token, logprob) from the logits at batch `index` (inside the step)."""
        raise NotImplementedError

    def _piece(self, token: int) -> bytes:
        """What `token` adds to the text."""
        raise NotImplementedError

    _ll_tokenizer: Callable[[], Any]  # llguidance's view of the vocabulary (constraints)

    def _token_bytes(self, token: int) -> bytes:
        return self._piece(token)

    def _peak_memory(self) -> int | None:
        return None

    def _free(self) -> None:
        raise NotImplementedError

    def _save_file(self, path: Path, limit: int) -> int:  # the state beside a conversation
        return 0

    def _load_file(self, path: Path) -> list[int] | None:
        return None

    # -- feeding the sequence ---------------------------------------------------------------

    def feed(self, tokens: Sequence[int], *, sample: bool | Callable[[int], Any] = False,
             logits: int = 1) -> Any:
        """Decode `tokens` after `cache.tokens` in the batcher's steps, keeping `cache.tokens`
        what the state holds; with `sample`, the (token, logprob) sampled at the last one (or
        what `sample(batch index of the last)` returns, with `logits` trailing positions read).
        A cancel keeps the decoded part and raises Cancelled; a failed step's part is cut."""
        if not tokens:
            return None
        if self._cancel.is_set():
            raise Cancelled
        cache, began = self.cache, time.perf_counter()
        pick = sample if callable(sample) else (self._sample_at if sample else None)
        work = Work(self._seq, list(tokens), len(cache.tokens), sample=pick,
                    cancel=self._cancel, logits=logits)
        try:
            result = self.batcher.decode(work)
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

    def advance(self, tokens: Sequence[int], limit: int) -> list[tuple[int, Any]]:
        """Feed `tokens` and sample what follows, with drafts when they pay (`draft.drafting`)."""
        return drafting.advance(self, tokens, limit)

    def _before_draft(self, pos: int) -> None:
        """Before a verification step whose first token lands at `pos`."""

    def _roll_back(self, keep: int) -> None:
        """Keep the first `keep` tokens of the state after a verification step."""
        self.cache.truncate(keep)

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
            raise EngineClosed()
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

    def _answer(self, messages: tuple[Message, ...], opts: ChatOptions,
                prompt: str | Sequence[int] | None = None) -> Iterator[Chunk]:
        """One answer's chunks (`answering.answer`)."""
        return answering.answer(self, messages, opts, prompt)

    def _threads_now(self) -> tuple[int, int, str]:
        """(CPU threads decoding now, the plan's count, why they moved); zeros: no such count."""
        return 0, 0, ""

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
