"""Token by token control of one answer, shared by both backends: the grammar's mask and the
logprobs, on the logits of the position being sampled (a numpy float32 vector).

A backend calls, for each token:
    control.before(logits)       # raw logprobs kept (when asked), then the mask applied in place
    token = <sample from logits>
    control.logprob(token)       # its TokenLogprob (None when not asked)
    control.accept(token)        # the grammar moves on; the reasoning state follows the text

llama.cpp applies the mask to `llama_get_logits_ith`'s buffer before its sampler chain runs;
MLX runs `before` inside a logits processor (and `accept` for the previous token there, since
mlx-lm computes the next logits before it hands out the current token).

While the answer is inside its reasoning (`in_thinking`), nothing is masked: the grammar
starts after `</think>` (a model that opens `<think>` itself may do so with its first token),
and the whitespace fed right after the tag (the blank line of a closing the loop writes, when
the budget, the user or the length cap ends the thought) is not the grammar's: the answer's
form starts at its first other token, whoever closed the thought. The mask is llguidance's bitmask (one bit per token, filled lazily by
the matcher: ~0.1 ms on a 49k vocabulary); after the grammar is complete, only end-of-text is
allowed, so the answer stops there.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable

import numpy as np

from pocketchat.engines.answer.thinking import CLOSE_TAG, OPEN_TAG
from pocketchat.engines.types import TokenLogprob, TopLogprob

MAX_TOP_LOGPROBS = 20


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class TokenControl:
    """One answer's mask and logprobs (see the module docstring).

    `token_bytes(t)`: a token's text as bytes (what it adds to the answer); `grammar`:
    llguidance grammar text (checked already, `grammar.checked_grammar`) or None, matched over
    `tokenizer` (an `LLTokenizer`); `top`: how many alternatives each logprob lists, or None
    for no logprobs.
    """

    def __init__(self, *, token_bytes: Callable[[int], bytes], tokenizer: Any = None,
                 grammar: str | None = None, top: int | None = None,
                 in_thinking: bool = False, may_think: bool = False) -> None:
        self.token_bytes = token_bytes
        self.tokenizer = tokenizer
        self.matcher: Any = None
        if grammar is not None:
            from llguidance import LLMatcher

            self.matcher = LLMatcher(tokenizer, grammar, log_level=0)
        matcher = self.matcher
        self.top = None if top is None else max(0, min(int(top), MAX_TOP_LOGPROBS))
        self.in_thinking = in_thinking and matcher is not None
        self._tail = ""  # the end of the reasoning so far (to see </think> split over tokens)
        self._gap = False  # just past </think>: whitespace tokens there are not the grammar's
        # A model that opens its reasoning itself (the prompt did not): its first token may be
        # <think> when that is one token of the vocabulary; the grammar waits for </think>.
        self._opener: int | None = None
        if may_think and self.matcher is not None and not self.in_thinking:
            ids = tokenizer.tokenize_str(OPEN_TAG, parse_special=True)
            self._opener = ids[0] if len(ids) == 1 else None
        self._raw: deque[np.ndarray] = deque()
        self._mask: np.ndarray | None = None
        self.mask_seconds = 0.0  # time spent computing and applying masks (the benchmark's figure)
        self.mask_cpu_seconds = 0.0  # the same in this thread's CPU time (steady on a busy machine)
        self.masked_tokens = 0
        if matcher is not None:
            from llguidance.numpy import allocate_token_bitmask

            self._mask = allocate_token_bitmask(1, tokenizer.vocab_size)

    @property
    def constraining(self) -> bool:
        return self.matcher is not None and not self.in_thinking and not self.matcher.is_error()

    def before(self, logits: np.ndarray) -> None:
        if self.top is not None:
            peak = float(logits.max())
            lse = peak + math.log(float(np.exp(logits - peak, dtype=np.float64).sum()))
            self._raw.append(logits - np.float32(lse))
        if self.constraining:
            from llguidance.numpy import fill_next_token_bitmask

            t0, c0 = time.perf_counter(), time.thread_time()
            fill_next_token_bitmask(self.matcher, self._mask)
            allowed = np.unpackbits(self._mask.view(np.uint8), bitorder="little").view(bool)
            if self._opener is not None and self._opener < len(allowed):
                allowed[self._opener] = True
            n = min(len(logits), len(allowed))
            np.putmask(logits[:n], ~allowed[:n], -np.inf)
            if len(logits) > n:
                logits[n:] = -np.inf
            self.mask_seconds += time.perf_counter() - t0
            self.mask_cpu_seconds += time.thread_time() - c0
            self.masked_tokens += 1

    def logprob(self, token: int) -> TokenLogprob | None:
        if self.top is None or not self._raw:
            return None
        lp = self._raw.popleft()
        top: tuple[TopLogprob, ...] = ()
        if self.top:
            k = min(self.top, len(lp))
            idx = np.argpartition(-lp, k - 1)[:k]
            idx = idx[np.argsort(-lp[idx], kind="stable")]
            top = tuple(self._top(int(i), float(lp[i])) for i in idx)
        raw = self.token_bytes(token)
        return TokenLogprob(token=_text(raw), logprob=float(lp[token]), bytes=tuple(raw), top=top)

    def _top(self, token: int, logprob: float) -> TopLogprob:
        raw = self.token_bytes(token)
        return TopLogprob(token=_text(raw), logprob=logprob, bytes=tuple(raw))

    def accept(self, token: int) -> None:
        if self.matcher is None:
            return
        opener, self._opener = self._opener, None  # only the first token may open it
        if opener is not None and token == opener:
            self.in_thinking = True
            return
        if self.in_thinking:
            self._tail = (self._tail + _text(self.token_bytes(token)))[-64:]
            at = self._tail.find(CLOSE_TAG)
            if at >= 0:
                self.in_thinking = False
                rest = self._tail[at + len(CLOSE_TAG):]
                self._gap = not rest.strip()
                if rest.strip():  # answer text in the same token as the tag: the grammar reads it
                    self._consume_text(rest.lstrip())
            return
        if self._gap:
            text = _text(self.token_bytes(token))
            if not text.strip() and not self.matcher.validate_tokens([token]):
                return  # the closing's blank line: the grammar starts after it
            self._gap = False
        if not self.matcher.is_error():
            self.matcher.consume_token(token)

    def _consume_text(self, text: str) -> None:
        tokens = self.tokenizer.tokenize_str(text)
        if tokens:
            self.matcher.try_consume_tokens(tokens)

    def consume_prefill(self, text: str) -> bool:
        """The grammar reads a prefilled start of the answer; False when it does not fit."""
        if self.matcher is None or self.in_thinking or not text:
            return True
        tokens = self.tokenizer.tokenize_str(text)
        return self.matcher.try_consume_tokens(tokens) == len(tokens)

    @property
    def done(self) -> bool:
        """The grammar is complete: only end-of-text can follow."""
        return self.matcher is not None and not self.in_thinking and self.matcher.is_stopped()

