"""A real `EngineBase` over a fake runtime that writes a script (the fast lane's contract engine).

The vocabulary is characters (a token is a code point) plus one end-of-text token (`END`); the
template writes `<role>content` lines and ends a generation prompt with `<assistant>`; with
thinking on it opens a thought (`<think>`), as Qwen's templates do. The runtime's state is the
list of tokens fed (`fed`), which can be cut back. Each answer samples `script` one character at
a time, then `END`; a step records its parts (`steps`), so tests see what was decoded.

Its time is modelled, not measured (`clock`, for what weighs steps against each other: the draft
policy): a step costs `STEP_SECONDS` plus `TOKEN_SECONDS` per token after its first, and a
drafter may `charge` what its drafting costs, so those decisions do not depend on the machine.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pocketchat.engines.base import EngineBase
from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.batch.batcher import Batcher
from pocketchat.engines.types import EngineInfo
from pocketchat.types import LoadPlan

END = 0x110000
STEP_SECONDS = 0.010  # a modelled decode step of one token
TOKEN_SECONDS = 0.001  # each further token in the same step


class TokenOps:
    """The fake runtime's sequence state: the tokens fed, which can be cut back."""

    trimmable = True
    partial = False

    def __init__(self) -> None:
        self.fed: list[int] = []

    def trim(self, n: int) -> bool:
        del self.fed[n:]
        return True

    def snapshot(self) -> tuple[Any, int]:
        return list(self.fed), len(self.fed)

    def restore(self, state: Any, n: int) -> None:
        self.fed = list(state)[:n]

    def clear(self) -> None:
        self.fed.clear()


class ScriptEngine(EngineBase):
    """See the module docstring. `script` may change between answers; `gate` (an Event), when
    set by a test, makes each sampled token wait for it (to cancel mid-answer)."""

    label = "script"

    def __init__(self, script: str = "Hello.", *, n_ctx: int = 512, n_batch: int = 64,
                 thinking: bool = False) -> None:
        self.script = script
        self.steps: list[list[tuple[int, int]]] = []  # each step: (first position, count)
        self.gate: threading.Event | None = None
        self.on_token: Any = None  # called with the number of tokens sampled so far
        self.now = 0.0  # the modelled clock (see the module docstring)
        self._thinking_template = thinking
        super().__init__(LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0,
                                  n_ctx=n_ctx, n_batch=n_batch, n_threads=1, n_threads_batch=1),
                         Path("script.gguf"), name="script")

    def _load(self, path: Path, name: str | None, on_progress: Any) -> EngineInfo:
        self.n_ctx = self.plan.n_ctx
        self.ops = TokenOps()
        self.cache = PrefixCache(self.ops)
        self.template_source = "{{ messages }}" + (" <think> enable_thinking"
                                                   if self._thinking_template else "")
        self.knows_thinking_switch = self.mentions_think = self._thinking_template
        self.end_tokens = frozenset({END})
        self.batcher = Batcher(self._run_step, self.plan.n_batch, solo=True)
        return EngineInfo(backend="llama.cpp", model="script", placement="cpu",
                          n_ctx=self.n_ctx, path=str(path), thinking=self._thinking_template)

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        text = "".join(f"<{d['role']}>{d.get('content') or ''}\n" for d in dicts)
        if generation:
            text += "<assistant>" + ("<think>" if kwargs.get("enable_thinking")
                                     and self._thinking_template else "")
        return text

    def _encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def _piece(self, token: int) -> bytes:
        return b"" if token == END else chr(token).encode()

    def _ll_tokenizer(self) -> Any:
        raise ValueError("the script runtime has no llguidance tokenizer")

    def _begin(self, sampling: Any, control: Any) -> None:
        self._next = 0

    def clock(self) -> float:
        """The modelled seconds so far."""
        return self.now

    def charge(self, seconds: float) -> None:
        """Time spent beside the steps (a costly drafter's drafting)."""
        self.now += seconds

    def _run_step(self, parts: list) -> int:
        for work, start, n in parts:
            self.steps.append((work.pos + start, n))
            self.ops.fed.extend(work.tokens[start: start + n])
        self.now += STEP_SECONDS + TOKEN_SECONDS * max(0, sum(n for _, _, n in parts) - 1)
        return 0

    def _sample_at(self, index: int) -> tuple[int, Any]:
        if self.gate is not None:
            self.gate.wait(5)
        at = self._next
        self._next += 1
        if self.on_token is not None:
            self.on_token(self._next)
        return (ord(self.script[at]) if at < len(self.script) else END), None

    def _free(self) -> None:
        self.ops.clear()
