"""The llama.cpp backend, in this process: `LlamaCppEngine(plan, path)` implements `Engine`.

One answer, step by step:
1. the conversation is fitted into the window (`context.fit_messages`, oldest turns out);
2. the prompt comes from the GGUF's chat template (`template.ChatTemplate`), thinking on/off;
3. `Llama.generate` reuses the KV cache for the prefix it shares with the previous turn and
   evaluates the rest; an abort callback, set only while the prompt is evaluated, lets
   `cancel()` interrupt a long prompt inside llama.cpp (it costs nothing per generated token
   because it is removed before the first one);
4. tokens are turned into text with an incremental UTF-8 decoder (a character split across
   tokens is never garbled) and split into answer and thinking (`thinking.ThinkSplitter`);
5. the stats come from llama.cpp's own counters, reset at the start of each answer. The
   snapshot taken when the first token appears splits them: everything before it is prompt
   processing, everything after it is decoding. `generated_tokens` is the number of tokens
   llama.cpp has decoded in this answer, so `decode_tok_s` is exactly llama.cpp's figure; at
   the end the last sampled token is decoded too (it is part of the next turn's prompt
   anyway), so the final count is every token of the answer.
"""

from __future__ import annotations

import codecs
import ctypes
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from pocketchat.errors import EngineError, PocketchatError
from pocketchat.modelfile import gguf as ggufcheck
from pocketchat.engines.context import fit_messages, reply_reserve
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Message, Stats
from pocketchat.engines.llamacpp.load import ProgressFn, load_llama
from pocketchat.engines.template import template_for
from pocketchat.engines.thinking import CLOSE_TAG, OPEN_TAG, ThinkSplitter
from pocketchat.types import LoadPlan


def _counted(perf: Any) -> tuple[int, float]:
    """(tokens, milliseconds) llama.cpp has evaluated since the last reset, prompt and single.

    `llama_perf_context` reports at least 1 for each count (it guards a division), so a count
    whose time is zero is really zero.
    """
    n = (perf.n_p_eval if perf.t_p_eval_ms > 0 else 0) + (perf.n_eval if perf.t_eval_ms > 0 else 0)
    return n, perf.t_p_eval_ms + perf.t_eval_ms


def peak_rss_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class LlamaCppEngine:
    """A GGUF served by llama-cpp-python in this process (see `worker.WorkerEngine` for the
    child-process version the app uses). The constructor checks the file, loads it and returns
    when the model is ready; `on_progress(stage, fraction)` reports the loading."""

    def __init__(self, plan: LoadPlan, path: Path, *, name: str | None = None,
                 on_progress: ProgressFn | None = None) -> None:
        path = Path(path)
        if on_progress:
            on_progress("checking", 0.0)
        self.gguf = ggufcheck.check_gguf(path)
        self.plan = plan
        loaded = load_llama(plan, path, self.gguf, on_progress=on_progress)
        self._llm = loaded.llm
        self.overrides = loaded.overrides
        self.overridden = loaded.overridden
        llama_cpp = self._lib = sys.modules["llama_cpp"]
        llm = self._llm
        self._ctx = llm._ctx.ctx
        self._vocab = llm._model.vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog
        self._perf = llama_cpp.llama_perf_context
        self._piece_buf = ctypes.create_string_buffer(256)
        eos, bos = llm.token_eos(), llm.token_bos()
        self.template, template_note = template_for(
            self.gguf.chat_template, arch=self.gguf.arch, model=name or self.gguf.name or path.stem,
            has_token=self._is_special_token,
            eos_token=llm._model.token_get_text(eos) if eos >= 0 else "",
            bos_token=llm._model.token_get_text(bos) if bos >= 0 else "",
        )
        self._specials = {t: t for t in (OPEN_TAG, CLOSE_TAG)}
        self._cancel = threading.Event()
        self._busy = threading.Lock()
        self._active = False
        self._abort_cb = llama_cpp.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self._no_abort = llama_cpp.ggml_abort_callback()
        self._closed = False
        self.info = EngineInfo(
            backend="llama.cpp",
            model=name or self.gguf.name or path.stem,
            placement=plan.describe(),
            n_ctx=llm.n_ctx(),
            path=str(path),
            notes=(template_note,) if template_note else (),
            thinking=self.template.knows_thinking_switch or self.template.mentions_think,
        )
        if on_progress:
            on_progress("ready", 1.0)

    def _is_special_token(self, text: str) -> bool:
        """Whether `text` is one special token of this model's vocabulary."""
        try:
            return len(self._llm.tokenize(text.encode(), add_bos=False, special=True)) == 1
        except Exception:  # noqa: BLE001 - a tokenizer that refuses the text does not know it
            return False

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
        with self._busy:
            self._llm.close()
            self._llm = None

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

    def _tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _answer(self, messages: tuple[Message, ...], opts: ChatOptions) -> Iterator[Chunk]:
        started = time.perf_counter()
        llm, lib = self._llm, self._lib
        n_ctx = llm.n_ctx()
        try:
            budget = n_ctx - reply_reserve(n_ctx, opts.max_tokens)
            fitted = fit_messages(
                messages,
                lambda ms: len(self._tokenize(self.template.render(ms, thinking=opts.thinking).text)),
                budget,
            )
            prompt = self.template.render(fitted.messages, thinking=opts.thinking)
            tokens = self._tokenize(prompt.text)
        except PocketchatError as exc:
            yield Chunk.failed(exc, Stats(context_limit=n_ctx))
            return
        dropped = fitted.dropped
        sampling = self.plan.sampling
        temp = sampling.temperature if opts.temperature is None else opts.temperature
        llm.set_seed(opts.seed if opts.seed is not None else lib.LLAMA_DEFAULT_SEED)
        max_new = n_ctx - len(tokens)
        if opts.max_tokens is not None:
            max_new = min(max_new, max(opts.max_tokens, 0))
        splitter = ThinkSplitter(in_thinking=prompt.in_thinking)
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        ctx = self._ctx
        lib.llama_perf_context_reset(ctx)
        lib.llama_set_abort_callback(ctx, self._abort_cb, None)
        mark: Any = None  # perf counters when the first token appeared
        ttft: float | None = None
        finish: str | None = None
        last: int | None = None
        sampled = 0

        def stats() -> Stats:
            p_tok, p_ms = _counted(self._perf(ctx))
            g_tok, g_ms = 0, 0.0
            if mark is not None:
                g_tok, g_ms = p_tok - mark[0], p_ms - mark[1]
                p_tok, p_ms = mark
            return Stats(
                prompt_tokens=p_tok, prompt_seconds=p_ms / 1000.0,
                generated_tokens=g_tok, decode_seconds=g_ms / 1000.0,
                ttft_seconds=ttft, context_used=llm.n_tokens, context_limit=n_ctx,
                dropped_messages=dropped,
            )

        gen = None
        try:
            if max_new <= 0:
                finish = "length"
            else:
                gen = llm.generate(
                    tokens,
                    top_k=sampling.top_k if opts.top_k is None else opts.top_k,
                    top_p=sampling.top_p if opts.top_p is None else opts.top_p,
                    min_p=sampling.min_p,
                    temp=temp,
                    repeat_penalty=sampling.repeat_penalty,
                )
            for token in gen or ():
                if mark is None:
                    lib.llama_set_abort_callback(ctx, self._no_abort, None)
                    mark = _counted(self._perf(ctx))
                    ttft = time.perf_counter() - started
                sampled += 1
                last = token
                if self._is_eog(self._vocab, token) and not opts.ignore_eos:
                    finish = "stop"
                    break
                answer, thinking = splitter.feed(utf8.decode(self._piece(token)))
                if answer or thinking:
                    yield Chunk(text=answer, thinking=thinking, stats=stats())
                if self._cancel.is_set():
                    finish = "cancelled"
                    break
                if sampled >= max_new:
                    finish = "length"
                    break
            else:
                if finish is None:
                    finish = "cancelled" if self._cancel.is_set() else "stop"
        except RuntimeError as exc:  # llama_decode failed: aborted by cancel(), or a real error
            lib.llama_set_abort_callback(ctx, self._no_abort, None)
            llm.reset()  # the cache may hold a partial batch: start clean next time
            if self._cancel.is_set():
                finish = "cancelled"
            else:
                yield Chunk(stats=stats(), finish_reason="error", error=f"llama.cpp failed: {exc}")
                return
        finally:
            if gen is not None:
                gen.close()
            lib.llama_set_abort_callback(ctx, self._no_abort, None)
        if finish in ("stop", "length") and last is not None and llm.n_tokens < n_ctx:
            try:
                llm.eval([last])  # decode the last token: counted, and cached for the next turn
                lib.llama_synchronize(ctx)  # llama.cpp books a decode's time when it syncs
            except RuntimeError:
                llm.reset()
        answer, thinking = splitter.feed(utf8.decode(b"", final=True))
        tail_a, tail_t = splitter.flush()
        final = stats()
        final = Stats(**{**final.__dict__, "peak_memory_bytes": peak_rss_bytes()})
        yield Chunk(text=answer + tail_a, thinking=thinking + tail_t, stats=final,
                    finish_reason=finish)  # type: ignore[arg-type]

    def _piece(self, token: int) -> bytes:
        lib, buf = self._lib, self._piece_buf
        n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n == 0:  # a control token: only the thinking tags are text we want
            text = self._llm._model.token_get_text(token)
            return self._specials.get(text, "").encode()
        return buf.raw[:n]
