"""The llama.cpp backend, in this process: `LlamaCppEngine(plan, path)` implements `Engine`.

The answer's skeleton (fit, render, reuse, think-splitting, stats) is `base.EngineBase`'s; this
module drives llama.cpp itself, so the prefix cache knows exactly which tokens the context
holds (generated tokens as generated):
- prompts are evaluated with `llama_decode` in batches of `n_batch`; an abort callback, set
  only while a prompt is evaluated, lets `cancel()` interrupt it inside llama.cpp (it costs
  nothing per generated token because it is removed before the first one);
- tokens are sampled by a llama.cpp sampler chain built from the merged sampling settings
  (penalties, top-k, top-p, min-p, temperature, seeded; greedy at temperature 0) and turned
  into text with an incremental UTF-8 decoder (a character split across tokens is never
  garbled); when the answer is constrained or asks for logprobs, the logits of the position
  being sampled are read as a numpy view of `llama_get_logits_ith`'s buffer, and the control
  (`constrain.control.TokenControl`) records them and masks them in place before the chain runs;
- the state's cut/snapshot/restore operations are `state.LlamaState`'s;
- with a plan's `parallel` N > 1 the context holds N sequences: N engines
  over it (`sequence_engines()`; this one is sequence 0), whose tokens go through one `slots.Batcher` (one
  `llama_batch` a step, each sequence sampling at its own batch index); `slots.Slots` is the
  engine over them. With N = 1 none of that exists: the path below is unchanged;
- the stats come from llama.cpp's own counters, reset at the start of each answer (with
  several sequences, this sequence's own token counts and clocks instead). The
  snapshot taken when the first token appears splits them: everything before it is prompt
  processing, everything after it is decoding, so `decode_tok_s` is exactly llama.cpp's
  figure; at the end the last sampled token is decoded too (it is part of the next turn's
  prompt anyway), so the final count is every token of the answer.
"""

from __future__ import annotations

import codecs
import ctypes
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from pocketchat.errors import EngineError, UnsupportedRequest
from pocketchat.modelfile import gguf as ggufcheck
from pocketchat.engines.base import Cancelled, EngineBase, SamplingSettings, Step, Timing
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.llamacpp.load import ProgressFn, load_llama
from pocketchat.engines.llamacpp.state import LlamaState
from pocketchat.engines.prefix_cache import PrefixCache
from pocketchat.engines.slots import Batcher, Part
from pocketchat.engines.template import template_for
from pocketchat.engines.threads import ThreadControl
from pocketchat.engines.thinking import CLOSE_TAG, OPEN_TAG
from pocketchat.engines.types import ChatOptions, EngineInfo

PENALTY_LAST_N = 64  # tokens the repeat/presence/frequency penalties look back over


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


class LlamaCppEngine(EngineBase):
    """A GGUF served by llama-cpp-python in this process (see `worker.WorkerEngine` for the
    child-process version the app uses). The constructor checks the file, loads it and returns
    when the model is ready; `on_progress(stage, fraction)` reports the loading."""

    label = "llama.cpp"

    def _load(self, path: Path, name: str | None, on_progress: ProgressFn | None) -> EngineInfo:
        plan = self.plan
        self.gguf = ggufcheck.check_gguf(path)
        loaded = load_llama(plan, path, self.gguf, on_progress=on_progress)
        self._llm = llm = loaded.llm
        self.overrides = loaded.overrides
        self.overridden = loaded.overridden
        lib = self._lib = sys.modules["llama_cpp"]
        self._ctx = llm.ctx
        self._vocab = lib.llama_model_get_vocab(llm.model)
        self._n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self._piece_buf = ctypes.create_string_buffer(256)
        eos, bos = llm.token_eos(), llm.token_bos()
        self.template, template_note = template_for(
            self.gguf.chat_template, arch=self.gguf.arch, model=name or self.gguf.name or path.stem,
            has_token=self._is_special_token,
            eos_token=self._token_text(eos) if eos >= 0 else "",
            bos_token=self._token_text(bos) if bos >= 0 else "",
        )
        self.template_source = self.template.source if self.gguf.chat_template else ""
        self.knows_thinking_switch = self.template.knows_thinking_switch
        self.mentions_think = self.template.mentions_think
        self._specials = {t: t for t in (OPEN_TAG, CLOSE_TAG)}
        self._n_batch = max(1, int(lib.llama_n_batch(self._ctx)))
        self._batch = lib.llama_batch_init(self._n_batch, 0, 1)
        self._root = self
        self._threads = self._thread_control(plan)
        self._batcher: Batcher | None = None
        if plan.parallel > 1:
            self.n_ctx = int(lib.llama_n_ctx_seq(self._ctx))
            self._batcher = Batcher(self._run_step, self._n_batch)
        else:
            self.n_ctx = llm.n_ctx()
        self._init_sequence(0)
        return EngineInfo(
            backend="llama.cpp",
            model=name or self.gguf.name or path.stem,
            placement=plan.describe(),
            n_ctx=self.n_ctx,
            path=str(path),
            notes=(template_note,) if template_note else (),
            thinking=self.thinks,
        )

    def _thread_control(self, plan: Any) -> ThreadControl:
        """The context's thread counts, adapted per step to a busy machine unless the user
        fixed them (`--threads`), every layer is on the GPU, or helpers hold part of the model
        (their step times include the link and the helpers: their counts are kept)."""
        lib, ctx = self._lib, self._ctx
        pinned = bool(plan.threads_pinned or plan.rpc_servers or plan.placement == "gpu")
        return ThreadControl(int(lib.llama_n_threads(ctx)), int(lib.llama_n_threads_batch(ctx)),
                             lambda decode, batch: lib.llama_set_n_threads(ctx, decode, batch),
                             pinned=pinned)

    def _threads_now(self) -> tuple[int, int, str]:
        control = self._threads
        if control.pinned:
            return control.threads, control.decode.full, ""
        return control.threads, control.decode.full, control.note()

    def _init_sequence(self, seq: int) -> None:
        """This engine's own part: its sequence's state and cache, its sampler, its counters."""
        lib = self._lib
        self._seq = seq
        lock = self._batcher.lock if self._batcher is not None else None
        self.state = LlamaState(self._ctx, self._llm.model, seq=seq, lock=lock)
        self.cache = PrefixCache(self.state, max_count=self.plan.checkpoints)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._sampler: Any = None
        self._control: TokenControl | None = None
        self._mark: tuple[int, float] | None = None
        self._last: int | None = None
        self._own: list[float] = [0, 0.0]  # tokens this sequence decoded, since (batched stats)
        self._abort_cb = lib.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self._no_abort = lib.ggml_abort_callback()

    def sequence_engines(self) -> list["LlamaCppEngine"]:
        """The engines of the context's sequences (this one first), sharing the model."""
        engines = [self]
        for seq in range(1, max(1, self.plan.parallel)):
            other = object.__new__(type(self))
            other.__dict__.update({k: v for k, v in self.__dict__.items()
                                   if k not in ("_cancel", "_busy")})
            other._init_harness()
            other._batch = None
            other._init_sequence(seq)
            engines.append(other)
        return engines

    def _is_special_token(self, text: str) -> bool:
        """Whether `text` is one special token of this model's vocabulary."""
        try:
            return len(self._llm.tokenize(text.encode(), add_bos=False, special=True)) == 1
        except Exception:  # noqa: BLE001 - a tokenizer that refuses the text does not know it
            return False

    def _token_text(self, token: int) -> str:
        raw = self._lib.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def cancel(self) -> None:
        super().cancel()
        if self._batcher is not None:  # a submission waiting for its step sees it at once
            self._batcher.wake()

    def _free(self) -> None:
        self._free_sampler()
        if self._root is not self:  # another sequence of the root's context
            self.cache.checkpoints = []
            if self._root._llm is not None:
                self.state.clear()
            return
        if self._batcher is not None:  # its step thread decodes into the context: stop it first
            self._batcher.close()
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        self.cache.checkpoints = []
        self._llm.close()
        self._llm = None

    def _free_sampler(self) -> None:
        if self._sampler is not None:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None

    # -- saved state ------------------------------------------------------------------------

    def _save_file(self, path: Path, limit: int) -> int:
        lib = self._lib
        size = self.state.size()
        if size > limit:
            return 0
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.state.save_file(path, self.cache.tokens)

    def _load_file(self, path: Path) -> list[int] | None:
        return self.state.load_file(path, self.n_ctx)

    # -- prompt -----------------------------------------------------------------------------

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        return self.template.apply(dicts, generation=generation, **kwargs)

    def _ll_tokenizer(self) -> Any:
        if self._root is not self:
            return self._root._ll_tokenizer()
        if self._ll_tok is None:
            import llguidance.llamacpp

            lib, vocab = self._lib, self._vocab
            ends = [t for t in (lib.llama_vocab_eos(vocab), lib.llama_vocab_eot(vocab))
                    if t >= 0 and lib.llama_vocab_is_eog(vocab, t)]
            with warnings.catch_warnings():  # it calls a deprecated binding once per token
                warnings.simplefilter("ignore", DeprecationWarning)
                self._ll_tok = llguidance.llamacpp.lltokenizer_from_vocab(
                    vocab, eos_token=sorted(set(ends)) or None)
        return self._ll_tok

    def _token_bytes(self, token: int) -> bytes:
        return self._piece(token) or self._token_text(token).encode()

    def _encode(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A raw prompt: BOS first when the GGUF asks for it (as llama.cpp's own completion);
        token ids are checked against the vocabulary (llama.cpp aborts on a foreign one)."""
        if isinstance(prompt, str):
            return self._llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        tokens = [int(t) for t in prompt]
        if any(not 0 <= t < self._n_vocab for t in tokens):
            raise UnsupportedRequest(f"the prompt has a token id outside this model's vocabulary "
                                     f"(0 to {self._n_vocab - 1})", param="prompt")
        return tokens

    # -- evaluation -------------------------------------------------------------------------

    def _decode(self, tokens: Sequence[int], *, logits_last: bool) -> None:
        """Evaluate `tokens` after `cache.tokens`, in batches; on failure the state is brought
        back to what `cache.tokens` says and Cancelled or EngineError is raised."""
        if self._batcher is not None:
            self._decode_shared(tokens)
            return
        lib, batch, cache = self._lib, self._batch, self.cache
        for i in range(0, len(tokens), self._n_batch):
            part = tokens[i: i + self._n_batch]
            base = len(cache.tokens)
            for j, tok in enumerate(part):
                batch.token[j] = tok
                batch.pos[j] = base + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                batch.logits[j] = 0
            if logits_last and i + len(part) == len(tokens):
                batch.logits[len(part) - 1] = 1
            batch.n_tokens = len(part)
            decoding = len(part) == 1
            self._threads.before(decoding)
            began = time.perf_counter()
            rc = lib.llama_decode(self._ctx, batch)
            if rc == 0:
                self._threads.after(decoding, len(part), time.perf_counter() - began)
            if rc != 0:
                cache.truncate(base)  # drop what the failed batch left
                if rc == 2 or self._cancel.is_set():
                    raise Cancelled
                raise EngineError(f"llama_decode returned {rc}")
            cache.tokens.extend(part)

    def _decode_shared(self, tokens: Sequence[int], sample: bool = False) -> Any:
        """`_decode` through the batcher, sampling the last token's logits when `sample`;
        the sampled token and its logprob."""
        if not tokens:
            return None
        result = self._feed_batched(tokens, self._sample_at if sample else None)
        self._own[0] += len(tokens)
        return result

    def _run_step(self, parts: list[Part]) -> int:
        """One batcher step: every part's tokens in one batch (the root's), decoded."""
        batch, j = self._batch, 0
        for work, start, n in parts:
            last = work.sample is not None and start + n == len(work.tokens)
            for i in range(start, start + n):
                batch.token[j] = work.tokens[i]
                batch.pos[j] = work.pos + i
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = work.seq
                batch.logits[j] = 1 if last and i == start + n - 1 else 0
                j += 1
        batch.n_tokens = j
        decoding = all(n == 1 for _, _, n in parts)  # each sequence's next token
        self._threads.before(decoding)
        began = time.perf_counter()
        rc = int(self._lib.llama_decode(self._ctx, batch))
        if rc == 0:
            self._threads.after(decoding, j, time.perf_counter() - began)
        return rc

    def _sample_at(self, index: int) -> tuple[int, Any]:
        """This sequence's next token from the logits at batch `index` (inside the step)."""
        lib, control = self._lib, self._control
        if control is not None:
            ptr = lib.llama_get_logits_ith(self._ctx, index)
            control.before(np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)))
        tok = lib.llama_sampler_sample(self._sampler, self._ctx, index)
        logprob = None
        if control is not None:
            logprob = control.logprob(tok)
            control.accept(tok)
        return tok, logprob

    def _evaluate(self, tokens: list[int]) -> None:
        if self._batcher is not None:
            if self._cancel.is_set():
                raise Cancelled
            self._decode_shared(tokens)
            return
        lib = self._lib
        lib.llama_set_abort_callback(self._ctx, self._abort_cb, None)
        try:
            if self._cancel.is_set():
                raise Cancelled
            self._decode(tokens, logits_last=False)
        finally:
            lib.llama_set_abort_callback(self._ctx, self._no_abort, None)

    def _begin(self, sampling: SamplingSettings, control: TokenControl | None) -> None:
        lib, s = self._lib, sampling
        if self._batcher is None:
            lib.llama_synchronize(self._ctx)  # book earlier work before the counters restart
            lib.llama_perf_context_reset(self._ctx)
        self._own = [0, time.perf_counter()]
        self._mark, self._last, self._control = None, None, control
        self._free_sampler()
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lambda smpl: lib.llama_sampler_chain_add(chain, smpl)  # noqa: E731
        if s.logit_bias:
            if any(not 0 <= t < self._n_vocab for t, _ in s.logit_bias):
                lib.llama_sampler_free(chain)
                raise UnsupportedRequest(f"logit_bias names a token id outside this model's "
                                         f"vocabulary (0 to {self._n_vocab - 1})", param="logit_bias")
            biases = (lib.llama_logit_bias * len(s.logit_bias))(
                *(lib.llama_logit_bias(t, b) for t, b in s.logit_bias))
            add(lib.llama_sampler_init_logit_bias(self._n_vocab, len(biases), biases))
        if s.repeat_penalty != 1.0 or s.presence_penalty or s.frequency_penalty:
            add(lib.llama_sampler_init_penalties(self._n_vocab, PENALTY_LAST_N, s.repeat_penalty,
                                                 s.frequency_penalty, s.presence_penalty))
        if s.greedy:
            add(lib.llama_sampler_init_greedy())
        else:
            add(lib.llama_sampler_init_top_k(s.top_k))
            add(lib.llama_sampler_init_top_p(s.top_p, 1))
            add(lib.llama_sampler_init_min_p(s.min_p, 1))
            add(lib.llama_sampler_init_temp(s.temperature))
            seed = s.seed if s.seed is not None else lib.LLAMA_DEFAULT_SEED
            add(lib.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        self._sampler = chain

    def _generate(self, tokens: list[int], opts: ChatOptions, max_new: int) -> Iterator[Step]:
        if self._batcher is not None:  # with the other sequences: each token in a batcher step
            with self._batcher.member(self._seq):
                self._evaluate(tokens[:-1])
                shared = lambda toks: self._decode_shared(toks, sample=True)  # noqa: E731
                yield from self._tokens(shared(tokens[-1:]), shared, opts, max_new)
            return
        lib, ctx = self._lib, self._ctx
        self._evaluate(tokens[:-1])
        lib.llama_set_abort_callback(ctx, self._abort_cb, None)
        try:
            self._decode(tokens[-1:], logits_last=True)
        finally:
            lib.llama_set_abort_callback(ctx, self._no_abort, None)

        def alone(toks: list[int]) -> tuple[int, Any]:
            self._decode(toks, logits_last=True)
            return self._sample_at(-1)

        yield from self._tokens(self._sample_at(-1), alone, opts, max_new)

    def _tokens(self, first: tuple[int, Any], step: Callable[[list[int]], tuple[int, Any]],
                opts: ChatOptions, max_new: int) -> Iterator[Step]:
        """The answer's steps from its first sampled (token, logprob); `step([token])` decodes
        a token and samples the next. Ends at an end-of-generation token or the length cap."""
        tok, logprob = first
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        sampled = 0
        while True:
            if self._mark is None:  # the first token: what came before is prompt processing
                self._mark = (_counted(self._lib.llama_perf_context(self._ctx))
                              if self._batcher is None else
                              (self._own[0], time.perf_counter() - self._own[1]))
            sampled += 1
            self._last = tok
            if self._lib.llama_vocab_is_eog(self._vocab, tok) and not opts.ignore_eos:
                yield Step(utf8.decode(b"", final=True), "stop")
                return
            text = utf8.decode(self._piece(tok))
            if sampled >= max_new or len(self.cache.tokens) >= self.n_ctx:
                yield Step(text + utf8.decode(b"", final=True), "length", logprob)
                return
            yield Step(text, None, logprob)
            self._last = None
            tok, logprob = step([tok])

    def _complete(self) -> None:
        """Decode the last sampled token: counted, and cached for the next turn."""
        if self._last is None or len(self.cache.tokens) >= self.n_ctx:
            return
        last, self._last = self._last, None
        try:
            self._decode([last], logits_last=False)
            if self._batcher is None:  # llama.cpp books a decode's time when it syncs
                self._lib.llama_synchronize(self._ctx)
        except (Cancelled, EngineError):
            pass

    def _timing(self) -> Timing:
        if self._batcher is not None:  # this sequence's own figures: the counters are shared
            n, secs = int(self._own[0]), time.perf_counter() - self._own[1]
            p_n, p_s = self._mark if self._mark is not None else (n, secs)
            return Timing(prompt_tokens=int(p_n), prompt_seconds=p_s,
                          generated_tokens=n - int(p_n), decode_seconds=secs - p_s,
                          peak_memory_bytes=peak_rss_bytes())
        p_tok, p_ms = _counted(self._lib.llama_perf_context(self._ctx))
        g_tok, g_ms = 0, 0.0
        if self._mark is not None:
            g_tok, g_ms = p_tok - self._mark[0], p_ms - self._mark[1]
            p_tok, p_ms = self._mark
        return Timing(prompt_tokens=p_tok, prompt_seconds=p_ms / 1000.0, generated_tokens=g_tok,
                      decode_seconds=g_ms / 1000.0, peak_memory_bytes=peak_rss_bytes())

    def _piece(self, token: int) -> bytes:
        lib, buf = self._lib, self._piece_buf
        n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n == 0:  # a control token: only the thinking tags are text we want
            return self._specials.get(self._token_text(token), "").encode()
        return buf.raw[:n]
