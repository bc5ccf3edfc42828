"""The llama.cpp backend, in this process: `LlamaCppEngine(plan, path)`, the runtime of the
base's token loop (`base.EngineBase`) over llama.cpp itself, so the prefix cache knows exactly
which tokens the context holds (generated tokens as generated):
- every decode is a step of the context's `batcher.Batcher` (`_run_step`: the parts' tokens in
  one `llama_batch`, each sequence's logits at its own batch index); with one sequence the
  steps run in the caller's thread (`solo`), with a plan's `parallel` N > 1 the context holds N
  sequences, N engines over it (`sequence_engines()`; this one is sequence 0) and one step
  thread; an abort callback, set only for a step without a token being decoded (prompt
  pieces), lets `cancel()` interrupt it inside llama.cpp (it costs nothing per generated
  token);
- tokens are sampled by a llama.cpp sampler chain built from the merged sampling settings
  (logit bias, penalties, top-k, top-p, min-p, temperature, seeded; greedy at temperature 0);
  when the answer is constrained or asks for logprobs, the logits of the position being
  sampled are read as a numpy view of `llama_get_logits_ith`'s buffer, and the control
  (`constrain.control.TokenControl`) records them and masks them in place before the chain runs;
- the state's cut/snapshot/restore operations are `state.LlamaState`'s;
- the CPU threads follow a busy machine (`threads.ThreadControl`, per step).
"""

from __future__ import annotations

import ctypes
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pocketchat.errors import EngineError, UnsupportedRequest
from pocketchat.modelfile import gguf as ggufcheck
from pocketchat.engines.base import EngineBase, SamplingSettings
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.draft.drafting import Drafting
from pocketchat.engines.llamacpp import mtp
from pocketchat.engines.llamacpp.load import ProgressFn, load_llama
from pocketchat.engines.llamacpp.mtp import MtpHead
from pocketchat.engines.llamacpp.rollback import Rollback
from pocketchat.engines.llamacpp.state import LlamaState
from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.batch.batcher import Batcher, Part
from pocketchat.engines.answer.template import template_for
from pocketchat.engines.llamacpp.threads import ThreadControl
from pocketchat.engines.answer.thinking import CLOSE_TAG, OPEN_TAG
from pocketchat.engines.types import EngineInfo

PENALTY_LAST_N = 64  # tokens the repeat/presence/frequency penalties look back over


def peak_rss_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def token_text(lib: Any, vocab: Any, token: int) -> str:
    """A token's text in the vocabulary (a special token's tag included)."""
    raw = lib.llama_vocab_get_text(vocab, token)
    return raw.decode("utf-8", errors="replace") if raw else ""


def llama_template(llm: Any, gguf: Any, model: str) -> tuple[Any, str]:
    """The renderer of a loaded GGUF's chat template, as the engine renders every prompt
    (`template.template_for`), and the note for the user ("" when the GGUF has one)."""
    lib = sys.modules["llama_cpp"]
    vocab = lib.llama_model_get_vocab(llm.model)

    def is_special(text: str) -> bool:  # one special token of the vocabulary
        try:
            return len(llm.tokenize(text.encode(), add_bos=False, special=True)) == 1
        except Exception:  # noqa: BLE001 - a tokenizer that refuses the text does not know it
            return False

    eos, bos = llm.token_eos(), llm.token_bos()
    return template_for(gguf.chat_template, arch=gguf.arch, model=model, has_token=is_special,
                        eos_token=token_text(lib, vocab, eos) if eos >= 0 else "",
                        bos_token=token_text(lib, vocab, bos) if bos >= 0 else "")


class LlamaCppEngine(EngineBase):
    """A GGUF served by llama-cpp-python in this process (see `worker.WorkerEngine` for the
    child-process version the app uses). The constructor checks the file, loads it and returns
    when the model is ready; `on_progress(stage, fraction)` reports the loading."""

    label = "llama.cpp"

    def _load(self, path: Path, name: str | None, on_progress: ProgressFn | None) -> EngineInfo:
        plan = self.plan
        self.gguf = ggufcheck.check_gguf(path)
        self._path = str(path)
        loaded = load_llama(plan, path, self.gguf, on_progress=on_progress)
        self._llm = llm = loaded.llm
        self.overrides = loaded.overrides
        self.overridden = loaded.overridden
        lib = self._lib = sys.modules["llama_cpp"]
        self._ctx = llm.ctx
        self._vocab = lib.llama_model_get_vocab(llm.model)
        self._n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self._piece_buf = ctypes.create_string_buffer(256)
        self.template, template_note = llama_template(llm, self.gguf,
                                                      name or self.gguf.name or path.stem)
        self.template_source = self.template.source if self.gguf.chat_template else ""
        self.knows_thinking_switch = self.template.knows_thinking_switch
        self.mentions_think = self.template.mentions_think
        self._specials = {t: t for t in (OPEN_TAG, CLOSE_TAG)}
        self._n_batch = max(1, int(lib.llama_n_batch(self._ctx)))
        self._batch = lib.llama_batch_init(self._n_batch, 0, 1)
        self._root = self
        self._threads = self._thread_control(plan)
        solo = plan.parallel <= 1
        self.n_ctx = llm.n_ctx() if solo else int(lib.llama_n_ctx_seq(self._ctx))
        self.batcher = Batcher(self._run_step, self._n_batch, solo=solo)
        self._mtp = self._mtp_head(plan, loaded.mtp)
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
        lock = self.batcher.lock
        self.state = LlamaState(self._ctx, self._llm.model, seq=seq, lock=lock)
        self.cache = PrefixCache(self.state, max_count=self.plan.checkpoints)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._sampler: Any = None
        self._control: TokenControl | None = None
        self._stepping: list[Part] = []  # the step being decoded (what the abort looks at)
        self._rollback = Rollback(self._ctx, self._llm.model, seq=seq, lock=lock)
        self._drafting = self._drafts(self.plan)
        self._abort_cb = lib.ggml_abort_callback(lambda _data: self._abort_now())
        self._no_abort = lib.ggml_abort_callback()

    def _mtp_head(self, plan: Any, loaded: bool) -> MtpHead | None:
        """The model's MTP head where `load.load_llama` loaded it (`types.runs_head`); `--draft
        mtp` without one is an error."""
        api = mtp.nextn_api(self._lib) if loaded else None
        if api is None or not mtp.mtp_layers(self._lib, self._llm.model):
            if plan.draft == "mtp":
                why = ("this llama.cpp has no MTP API" if loaded else
                       "this GGUF has no MTP block" if not self.gguf.mtp_layers else
                       "MTP drafts run on one sequence only (not with --parallel)")
                raise EngineError(f"--draft mtp: {why}; use --draft ngram or auto")
            return None
        return MtpHead(self._lib, api, self._llm.model, self._ctx, n_ctx=self.n_ctx,
                       n_batch=self._n_batch, threads=plan.n_threads,
                       threads_batch=plan.n_threads_batch)

    def _drafts(self, plan: Any) -> Drafting | None:
        """Drafting for this sequence where a rejected draft can be taken back cheaply: an
        attention-only model (its KV is cut), or a hybrid one with recurrent snapshots
        (`n_rs_seq`); not where only a copy of the whole recurrent state could. With the
        model's MTP head (sequence 0 of one) for `auto` and `mtp`, else prompt lookup."""
        rollback = self._rollback
        if plan.draft == "off" or rollback.kind == "snapshot":
            return None
        from pocketchat.paths import settings

        depth = min(plan.draft_depth, rollback.depth)
        head = self._mtp if self._seq == 0 else None
        return Drafting.for_model(plan.draft, self.end_tokens, depth, self._path,
                                  self.plan.n_threads, settings().cache_dir,
                                  mtp.MtpDrafter(head) if head is not None else None)

    def _before_draft(self, pos: int) -> None:
        self._rollback.prepare(pos)

    def _roll_back(self, keep: int) -> None:
        redo = self._rollback.roll_back(keep).redo_from
        if self._mtp is not None and self._seq == 0:
            self._mtp.cut(redo)
        again = self.cache.tokens[redo:keep]
        self.cache.forget_after(redo)
        if again:  # the snapshot kind: the kept tokens are decoded again
            self.feed(again)

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

    def _token_text(self, token: int) -> str:
        return token_text(self._lib, self._vocab, token)

    def _free(self) -> None:
        self._free_sampler()
        if self._drafting is not None:
            self._drafting.save()
        if self._root is not self:  # another sequence of the root's context
            self.cache.checkpoints = []
            if self._root._llm is not None:
                self.state.clear()
            return
        self.batcher.close()  # its step thread decodes into the context: stop it first
        if self._mtp is not None:
            self._mtp.close()
            self._mtp = None
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

    def _run_step(self, parts: list[Part]) -> int:
        """One batcher step: every part's tokens in one batch (the root's), decoded."""
        batch, j = self._batch, 0
        for work, start, n in parts:
            wanted = (len(work.tokens) - work.logits if work.sample is not None
                      and start + n == len(work.tokens) else len(work.tokens))
            for i in range(start, start + n):
                batch.token[j] = work.tokens[i]
                batch.pos[j] = work.pos + i
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = work.seq
                batch.logits[j] = 1 if i >= wanted else 0
                j += 1
        batch.n_tokens = j
        decoding = all(n == 1 or w.logits > 1 for w, _, n in parts)  # next tokens, or drafts
        lib, ctx = self._lib, self._ctx
        if not decoding:  # prompt pieces: a cancel may interrupt them inside llama.cpp
            self._stepping = parts
            lib.llama_set_abort_callback(ctx, self._abort_cb, None)
        self._threads.before(decoding)
        began = time.perf_counter()
        try:
            rc = int(lib.llama_decode(ctx, batch))
        finally:
            if not decoding:
                lib.llama_set_abort_callback(ctx, self._no_abort, None)
                self._stepping = []
        if rc == 0:
            self._threads.after(decoding, j, time.perf_counter() - began)
            if self._mtp is not None:  # one sequence: its MTP head follows every decode
                work, start, n = parts[0]
                self._mtp.mirror(work.tokens[start:start + n], work.pos + start)
        return rc

    def _abort_now(self) -> bool:
        """Whether llama.cpp should stop the step it computes: every sequence in it cancelled."""
        works = [w for w, _, _ in self._stepping]
        return bool(works) and all(w.cancel is not None and w.cancel.is_set() for w in works)

    @property
    def end_tokens(self) -> frozenset[int]:  # type: ignore[override]
        """Every end-of-generation token of the vocabulary (found once, when first needed)."""
        ends = getattr(self, "_ends", None)
        if ends is None:
            lib, vocab = self._lib, self._vocab
            ends = self._ends = frozenset(t for t in range(self._n_vocab)
                                          if lib.llama_vocab_is_eog(vocab, t))
        return ends

    def is_end(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def _peak_memory(self) -> int | None:
        return peak_rss_bytes()

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

    def _begin(self, sampling: SamplingSettings, control: TokenControl | None) -> None:
        lib, s = self._lib, sampling
        self._control = control
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

    def _piece(self, token: int) -> bytes:
        lib, buf = self._lib, self._piece_buf
        n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n == 0:  # a control token: only the thinking tags are text we want
            return self._specials.get(self._token_text(token), "").encode()
        return buf.raw[:n]
