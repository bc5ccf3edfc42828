"""A real `EngineBase` on a fake model that fails where a test says (the fast lane's engine).

`FaultyEngine` runs the shared harness as it is (busy lock, prompt, prefix and prompt caches,
the answer's skeleton, settling, saved state) over a character-level "model": a token is a
character's code point, the template is `<role>content` lines, and the answer is the scripted
`reply`. `fail(point, exc)` arms one failure, raised once, the next time the engine passes
`point`:

  "render"     the chat template (every chat prompt)           -- while the answer is set up
  "encode"     the tokenizer (chat and complete prompts)        -- while the answer is set up
  "constraint" llguidance's tokenizer (a response_format)       -- while the answer is set up
  "generate"   the first evaluation of the prompt               -- before the first token
  "step"       after the first sampled token                    -- mid-answer
  "settle"     evaluating the answer into the history           -- after the final chunk
  "save" / "load" / "status"   the state file and the live figures

Any exception can be armed, BaseExceptions (KeyboardInterrupt) included.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

from pocketchat.engines.base import EngineBase
from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.batch.batcher import Batcher
from pocketchat.engines.types import ChatOptions, EngineInfo
from pocketchat.types import LoadPlan

END = 0x110000  # the fake vocabulary: characters, then the end of text, then the reply's words
WORDS = END + 1
ANSWER_POINTS = ("render", "encode", "constraint", "generate", "step", "settle")
POINTS = (*ANSWER_POINTS, "save", "load", "status")


class CharOps:
    """The fake model's sequence state: a list of tokens that can be cut back."""

    trimmable = True
    partial = False

    def __init__(self) -> None:
        self.state: list[int] = []

    def trim(self, n: int) -> bool:
        del self.state[n:]
        return True

    def snapshot(self) -> tuple[Any, int]:
        return list(self.state), len(self.state)

    def restore(self, state: Any, n: int) -> None:
        self.state = list(state)[:n]

    def clear(self) -> None:
        self.state.clear()


def plan(n_ctx: int = 512) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=1, n_threads_batch=1)


class FaultyEngine(EngineBase):
    """See the module docstring."""

    label = "fake"
    reply = "Hello there."

    def __init__(self, n_ctx: int = 512, *, seq: int = 0) -> None:
        self._armed: dict[str, BaseException] = {}  # for the next answer or state call
        self._live: dict[str, BaseException] = {}  # this answer's
        self._lock = threading.Lock()
        self._seq = seq
        super().__init__(plan(n_ctx), Path("fake.gguf"), name="fake")

    def fail(self, point: str, exc: BaseException) -> None:
        """Arm `exc` at `point`: for the next answer that starts (the answer before it may
        still be settling), or the next state call."""
        assert point in POINTS, point
        with self._lock:
            self._armed[point] = exc

    def disarm(self) -> None:
        """Forget the failures not reached (an answer dropped before it ran)."""
        with self._lock:
            self._armed.clear()
            self._live.clear()

    def _fault(self, point: str, *, live: bool = True) -> None:
        with self._lock:
            exc = (self._live if live else self._armed).pop(point, None)
        if exc is not None:
            raise exc

    def _take(self) -> None:
        with self._lock:
            self._live = {k: v for k, v in self._armed.items() if k in ANSWER_POINTS}
            for k in self._live:
                del self._armed[k]

    def _answer(self, messages: Any, opts: ChatOptions, prompt: Any = None) -> Iterator[Any]:
        self._take()
        yield from super()._answer(messages, opts, prompt)


    # -- the hooks -------------------------------------------------------------------------

    def _load(self, path: Path, name: str | None, on_progress: Any) -> EngineInfo:
        self.n_ctx = self.plan.n_ctx
        self.ops = CharOps()
        self.cache = PrefixCache(self.ops)
        self.template_source = "{{ messages }}"
        self.end_tokens = frozenset({END})
        self.batcher = Batcher(self._run_step, 64, solo=True)
        self._words: list[int] = []
        return EngineInfo(backend="llama.cpp", model=name or "fake", placement="cpu",
                          n_ctx=self.n_ctx, path=str(path))

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        self._fault("render")
        text = "".join(f"<{d['role']}>{d.get('content') or ''}\n" for d in dicts)
        return text + ("<assistant>" if generation else "")

    def _encode(self, text: str) -> list[int]:
        self._fault("encode")
        return [ord(c) for c in text]

    def _ll_tokenizer(self) -> Any:
        self._fault("constraint")
        raise ValueError("the fake model has no llguidance tokenizer")

    def _piece(self, token: int) -> bytes:
        if token >= WORDS:
            return self._reply_words()[token - WORDS].encode()
        return b"" if token == END else chr(token).encode()

    def _reply_words(self) -> list[str]:
        words = [w + " " for w in self.reply.split(" ")]
        words[-1] = words[-1].rstrip()
        return words

    def _begin(self, sampling: Any, control: Any) -> None:
        self._sampled = 0  # the answer's tokens sampled so far
        self._steps = 0

    def _run_step(self, parts: list) -> int:
        """The fake model's step: its state is the tokens themselves."""
        if self._steps == 0:
            self._fault("generate")  # the first evaluation of the answer's prompt
        elif self._sampled == 1:
            self._fault("step")  # after the first sampled token
        self._steps += 1
        for work, start, n in parts:
            self.ops.state.extend(work.tokens[start: start + n])
        return 0

    def _sample_at(self, index: int) -> tuple[int, Any]:
        n = self._sampled
        self._sampled += 1
        return (WORDS + n if n < len(self._reply_words()) else END), None

    def _evaluate(self, tokens: Any) -> None:
        self._fault("settle")  # only settling evaluates outside the answer's own steps
        super()._evaluate(tokens)

    def _free(self) -> None:
        self.ops.clear()

    def _save_file(self, path: Path, limit: int) -> int:
        self._fault("save", live=False)
        path.write_bytes(bytes(len(self.cache.tokens)))
        return len(self.cache.tokens)

    def _load_file(self, path: Path) -> list[int] | None:
        self._fault("load", live=False)
        return list(self.cache.tokens)

    def status(self) -> dict:
        self._fault("status", live=False)
        return super().status()
