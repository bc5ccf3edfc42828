"""The MLX backend, in this process: `MlxEngine(plan, path)` implements `Engine` with mlx-lm.

Loading: the folder is checked first (`mlxmodel.check_mlx_folder`: config, weights, tokenizer,
no cut safetensors), then, on a Metal GPU, its weights and KV cache are compared with Metal's
recommended working set (`mlxmodel.check_metal_budget`), then `mlx_lm.load` reads it. mlx and
mlx-lm are imported only here, when an engine is made; without them: `BackendMissing`.

The answer's recipe and the token loop are `base.EngineBase`'s; this module is their runtime
over mlx-lm:
- the prompt comes from the model's own chat template through the tokenizer
  (`enable_thinking=False` when thinking is off);
- the prefix cache's state is mlx-lm's per-layer cache (`cache.MlxState`);
- every evaluation is a step of the engine's `batcher.Batcher` (`_step_parts`): prompt pieces on
  the sequence's own cache; the token to sample after goes with the piece in one model call
  (one sequence: `solo`, on this engine's stream), or, with a plan's `parallel` N > 1 and
  caches mlx-lm can merge (`batch.batchable`), in one call over the decoding sequences'
  merged caches (`batch.MlxBatch`, which also owns the one thread all their MLX work runs
  on); N engines share the model then (`sequence_engines()`; this one is sequence 0).
  Caches that cannot be merged: one sequence, and `info.parallel_note` says why;
- each sequence samples its own row: the constraint (`TokenControl`: mask and logprobs),
  mlx-lm's logits processors (bias, penalties) and sampler (`make_sampler`), as mlx-lm's
  own loop; a token's bytes are llguidance's view of the vocabulary (`_piece`).
"""

from __future__ import annotations

import threading

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pocketchat.errors import PocketchatError, TemplateRefused
from pocketchat.engines.base import EngineBase, SamplingSettings
from pocketchat.engines.loaderror import load_error
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.mlx.batch import MlxBatch, batchable
from pocketchat.engines.mlx.cache import MlxState
from pocketchat.engines.mlx.model import (
    check_metal_budget,
    check_mlx_folder,
    import_mlx,
    kv_cache_bytes,
)
from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.batch.batcher import Batcher, Part, Work
from pocketchat.engines.answer.template import CHATML
from pocketchat.engines.types import EngineInfo

ProgressFn = Callable[[str, float], None]
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")
MIN_STEP, MAX_STEP = 32, 2048


class MlxEngine(EngineBase):
    """An MLX model folder served by mlx-lm in this process (the app uses it through
    `worker.WorkerEngine`). The constructor checks and loads the model and returns when it
    is ready; `on_progress(stage, fraction)` reports the stages."""

    label = "mlx"
    close_timeout = 2.0  # let an answer in another thread stop first

    def _load(self, path: Path, name: str | None, on_progress: ProgressFn | None) -> EngineInfo:
        plan = self.plan
        self.folder = check_mlx_folder(path)
        mx, mlx_lm = import_mlx()
        self._mx = mx
        self.device = mx.cpu if plan.placement == "cpu" else mx.default_device()
        metal = self.device == mx.gpu and mx.metal.is_available()
        n_ctx = plan.n_ctx
        if self.folder.context_length:
            n_ctx = min(n_ctx, self.folder.context_length)
        self.n_ctx = max(1, n_ctx)
        if metal:
            from pocketchat.metal import device_info

            dev = device_info(mx)
            check_metal_budget(self.folder.size_bytes, kv_cache_bytes(self.folder.config, self.n_ctx),
                               dev.get("max_recommended_working_set_size"), dev.get("memory_size"))
        if on_progress:
            on_progress("loading", 0.0)
        try:
            with mx.stream(self.device):
                self._model, self._tok = mlx_lm.load(str(path))
        except PocketchatError:
            raise
        except Exception as exc:  # noqa: BLE001 - mlx-lm raises ValueError, RuntimeError, OSError...
            raise load_error("mlx", self.folder.name, f"{type(exc).__name__}: {exc}", exc) from exc
        self._stream = mx.new_thread_local_stream(self.device)
        self._add_end_of_turn_tokens()
        self._template_source = str(self._tok.chat_template or "")
        self._has_template = bool(getattr(self._tok, "has_chat_template", self._template_source))
        if not self._has_template:
            self._template_source = CHATML
        self.template_source = self._template_source if self._has_template else ""
        self.knows_thinking_switch = "enable_thinking" in self._template_source
        self.mentions_think = "<think>" in self._template_source
        self._bos = self._tok.bos_token
        self._step = max(MIN_STEP, min(MAX_STEP, plan.n_batch))
        self._root = self
        self._batch: MlxBatch | None = None
        self._seqs: dict[int, MlxEngine] = {}
        self._tok_lock: Any = nullcontext()
        note = ""
        if plan.parallel > 1:
            from mlx_lm.models.cache import make_prompt_cache

            why = batchable(make_prompt_cache(self._model))
            if why is None:
                self._batch = MlxBatch(self._model, self.device)
                self._tok_lock = threading.Lock()
            else:
                note = f"mlx answers one at a time with this model: {why}"
        self.batcher = Batcher(self._run_step, self._step, solo=self._batch is None)
        self.end_tokens = frozenset(self._tok.eos_token_ids)
        self._init_sequence(0)
        return EngineInfo(
            backend="mlx",
            model=name or self.folder.name,
            placement="Metal GPU" if metal else ("GPU" if self.device == mx.gpu else "CPU"),
            n_ctx=self.n_ctx,
            path=str(path),
            notes=(note,) if note else (),
            thinking=self.thinks,
            parallel_note=note,
        )

    def _init_sequence(self, seq: int) -> None:
        """This engine's own part: its cache and prefix cache, its sampling, its counters."""
        self._seq = seq
        self.state = MlxState(self._model, self._batch.call if self._batch is not None else None)
        self.cache = PrefixCache(self.state, max_count=self.plan.checkpoints)
        self.state.length = lambda: len(self.cache.tokens)
        self._sampling_now: SamplingSettings | None = None
        self._control: TokenControl | None = None
        self._samplers: tuple[Any, list[Any]] = (None, [])
        self._sampled: tuple[int, Any] = (0, None)  # what the last step sampled for it
        self._seqs[seq] = self

    def sequence_engines(self) -> list["MlxEngine"]:
        """The engines of the sequences decoded together (this one first), sharing the model;
        this one alone when the plan has one sequence or the caches cannot be batched."""
        engines = [self]
        if self._batch is None:
            return engines
        for seq in range(1, self.plan.parallel):
            other = object.__new__(type(self))
            other.__dict__.update({k: v for k, v in self.__dict__.items()
                                   if k not in ("_cancel", "_busy")})
            other._init_harness()
            other._init_sequence(seq)
            engines.append(other)
        return engines

    def _add_end_of_turn_tokens(self) -> None:
        """Stop on the template's end-of-turn token even when the config names only <eos>."""
        vocab = self._tok.get_vocab()
        ids = set(self._tok.eos_token_ids)
        ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
        self._tok.eos_token_ids = ids

    @property
    def _cache(self) -> PrefixCache:
        return self.cache

    def _free(self) -> None:
        self.cache.checkpoints = []
        if self._root is not self:  # another sequence: the model is the root's
            if not self._root._closed:
                self.state.layers = []
            return
        self.batcher.close()  # no step after this
        self._model = self._tok = None
        self.state.layers = []
        if self._batch is not None:
            self._batch.close()
        self._mx.clear_cache()

    # -- prompt -----------------------------------------------------------------------------

    def _apply_template(self, dicts: list[dict], *, generation: bool, **kwargs: Any) -> str:
        if not self._has_template:
            kwargs["chat_template"] = CHATML
        try:
            return self._tok.apply_chat_template(dicts, tokenize=False,
                                                 add_generation_prompt=generation, **kwargs)
        except Exception as exc:  # noqa: BLE001 - jinja errors, the template's raise_exception
            raise TemplateRefused(f"the model's chat template refused the conversation: {exc}"
                                  ) from exc

    def _ll_tokenizer(self) -> Any:
        if self._root is not self:
            return self._root._ll_tokenizer()
        if self._ll_tok is None:
            import llguidance.hf

            self._ll_tok = llguidance.hf.from_tokenizer(  # logits past its vocabulary are masked
                self._tok._tokenizer, eos_token=sorted(self._tok.eos_token_ids))
        return self._ll_tok

    def _token_bytes(self, token: int) -> bytes:
        return self._ll_tokenizer().decode_bytes([token])

    def _encode(self, text: str) -> list[int]:
        add_special = self._bos is None or not text.startswith(self._bos)
        with self._tok_lock:  # sequences in their own threads share the tokenizer
            return list(self._tok.encode(text, add_special_tokens=add_special))

    # -- one answer -------------------------------------------------------------------------

    def _sampling(self) -> tuple[Any, list[Any]]:
        """mlx-lm's sampler and logits processors for the merged sampling settings (the
        constraint runs beside them: `_sample_row`)."""
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        s = self._sampling_now
        assert s is not None
        sampler = make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)
        processors = make_logits_processors(
            logit_bias=dict(s.logit_bias) or None,
            repetition_penalty=s.repeat_penalty if s.repeat_penalty != 1.0 else None,
            presence_penalty=s.presence_penalty or None,
            frequency_penalty=s.frequency_penalty or None)
        return sampler, processors

    def _save_file(self, path: Path, limit: int) -> int:
        if self._batch is not None and not self._batch.on_thread():
            return self._batch.call(self._save_file, path, limit)
        import json

        from mlx_lm.models.cache import save_prompt_cache

        if MlxState.nbytes(self.state.layers) > limit:
            return 0
        path.parent.mkdir(parents=True, exist_ok=True)
        target = path.with_name(path.name + ".safetensors")  # mlx adds the suffix itself
        save_prompt_cache(str(target), self.state.layers,
                          {"pocketchat_tokens": json.dumps(self.cache.tokens)})
        target.replace(path)
        return path.stat().st_size

    def _load_file(self, path: Path) -> list[int] | None:
        if self._batch is not None and not self._batch.on_thread():
            return self._batch.call(self._load_file, path)
        import json
        import shutil
        import tempfile

        from mlx_lm.models.cache import load_prompt_cache

        try:
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / "state.safetensors"
                shutil.copyfile(path, copy)
                layers, meta = load_prompt_cache(str(copy), return_metadata=True)
            tokens = json.loads(meta["pocketchat_tokens"])
        except Exception:  # noqa: BLE001 - a file mlx cannot read is ignored
            return None
        self.state.layers = layers
        return [int(t) for t in tokens]

    def _begin(self, sampling: SamplingSettings, control: TokenControl | None) -> None:
        if sampling.seed is not None:
            self._mx.random.seed(sampling.seed)
        self._sampling_now, self._control = sampling, control
        self._samplers = self._call(self._sampling)

    def _call(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` where this engine's MLX work runs: the batch's thread, or here on the
        engine's stream."""
        if self._batch is not None:
            return self._batch.call(fn, *args)
        with self._mx.stream(self._stream):
            return fn(*args)

    def _run_step(self, parts: list[Part]) -> int:
        """One batcher step: prompt pieces on their own caches, the sampling sequences' last
        tokens in one call over the batch (or on their own cache, alone), each sampling its row."""
        return self._call(self._step_parts, parts)

    def _step_parts(self, parts: list[Part]) -> int:
        mx, model = self._mx, self._model
        rows: list[tuple[MlxEngine, Work, int, Any]] = []  # (engine, work, end, logits)
        batched: list[tuple[MlxEngine, Work, int]] = []
        for work, start, n in parts:
            engine = self._seqs[work.seq]
            end = start + n
            sampled = work.sample is not None and end == len(work.tokens)
            tokens = list(work.tokens[start:end])
            if sampled and self._batch is None:  # alone: the piece and its logits in one call
                layers = engine.state.layers
                logits = model(mx.array(tokens)[None], cache=layers)[:, -1, :]
                rows.append((engine, work, end, logits))
                continue
            piece = tokens[:-1] if sampled else tokens
            if piece:
                layers = engine.state.layers  # its own (out of the batch, if it was in)
                model(mx.array(piece)[None], cache=layers)
                mx.eval([c.state for c in layers])
            if sampled:
                batched.append((engine, work, end))
        if batched:
            logits = self._batch.decode([e.state for e, _, _ in batched],  # type: ignore[union-attr]
                                        [w.tokens[end - 1] for _, w, end in batched])
            rows += [(e, w, end, row) for (e, w, end), row in zip(batched, logits, strict=False)]
        if not rows:
            return 0
        sampled = [engine._sample_row(work, end, row) for engine, work, end, row in rows]
        mx.eval(sampled)  # every row's token in one evaluation
        for (engine, _, _, _), token in zip(rows, sampled, strict=False):
            chosen = int(token.item())
            control = engine._control
            logprob = None
            if control is not None:
                logprob = control.logprob(chosen)
                control.accept(chosen)
            engine._sampled = (chosen, logprob)
        return 0

    def _sample_row(self, work: Work, end: int, logits: Any) -> Any:
        """The next token (an array, not yet evaluated) from this sequence's logits row after
        `work.tokens[:end]`: the constraint (mask, logprobs), mlx-lm's processors (over the
        prompt and answer so far) and sampler, as in its own loop."""
        mx = self._mx
        sampler, processors = self._samplers
        if self._control is not None:
            row = np.array(logits[0].astype(mx.float32))
            self._control.before(row)
            logits = mx.array(row)[None].astype(logits.dtype)
        if processors:
            tokens = mx.array([*self.cache.tokens, *work.tokens[:end]])
            for processor in processors:
                logits = processor(tokens, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return sampler(logprobs)

    def _sample_at(self, _index: int) -> tuple[int, Any]:
        return self._sampled

    def _piece(self, token: int) -> bytes:
        raw = self._token_bytes(token)
        if raw[:1] == b"\xff":  # a special token: only the thinking tags are text we want
            text = raw[1:]
            return text if text in (b"<think>", b"</think>") else b""
        return raw

    def _peak_memory(self) -> int | None:
        return int(self._mx.get_peak_memory())
