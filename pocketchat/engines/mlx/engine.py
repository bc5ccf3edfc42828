"""The MLX backend, in this process: `MlxEngine(plan, path)` implements `Engine` with mlx-lm.

Loading: the folder is checked first (`mlxmodel.check_mlx_folder`: config, weights, tokenizer,
no cut safetensors), then, on a Metal GPU, its weights and KV cache are compared with Metal's
recommended working set (`mlxmodel.check_metal_budget`), then `mlx_lm.load` reads it. mlx and
mlx-lm are imported only here, when an engine is made; without them: `BackendMissing`.

The answer's skeleton (fit, render, prefix cache and checkpoints, think-splitting, stats,
settling the answer for the next turn) is `base.EngineBase`'s; here:
- the prompt comes from the model's own chat template through the tokenizer
  (`enable_thinking=False` when thinking is off);
- the prefix cache's state is mlx-lm's per-layer cache (`cache.MlxState`);
- `mlx_lm.stream_generate` processes the rest of the prompt and samples (`make_sampler` and
  the penalty processors from the merged sampling settings; ignore_eos masks the end-of-turn
  tokens' logits); a constrained answer, or one that asks for logprobs, adds a logits
  processor that runs the shared `TokenControl` (mask and raw logprobs) on each position's
  logits; cancel() is seen between prompt batches (`plan.n_batch` tokens) and after every
  token;
- the stats are mlx-lm's own (`GenerationResponse`): prompt tokens and prompt tok/s, generated
   tokens and generation tok/s, peak memory. Seconds are derived from them (tokens / tok/s),
   so `Stats.decode_tok_s` is exactly mlx-lm's generation figure and `prompt_tok_s` its
   prompt figure. Prompt tokens are the tokens processed for this answer, not the cached ones;
- with a plan's `parallel` N > 1 and caches mlx-lm can merge (`batch.batchable`), N engines
  share the model (`sequence_engines()`; this one is sequence 0), each with its own cache,
  prefix cache and sampler; their tokens go through one `slots.Batcher`: a step evaluates
  newcomers' prompt pieces on their own caches and feeds the decoding sequences' tokens in
  one model call over their merged caches (`batch.MlxBatch`, which also owns the one thread
  all their MLX work runs on); each sequence samples its own row (the same sampler and
  processors as mlx-lm's loop) and detokenizes as mlx-lm does; the last sampled token is fed
  at the end (`_complete`), and the stats are the sequence's own counts and clocks, as on
  llama.cpp. `slots.Slots` is the engine over them. Caches that cannot be merged: one
  sequence, and `info.parallel_note` says why. With N = 1 none of that exists: the path
  above is unchanged.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from pocketchat.errors import EngineError, PocketchatError
from pocketchat.engines.base import (
    Cancelled,
    EngineBase,
    SamplingSettings,
    Step,
    Timing,
    load_error,
)
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.mlx.batch import MlxBatch, batchable
from pocketchat.engines.mlx.cache import MlxState
from pocketchat.engines.mlx.model import (
    check_metal_budget,
    check_mlx_folder,
    import_mlx,
    kv_cache_bytes,
)
from pocketchat.engines.prefix_cache import PrefixCache
from pocketchat.engines.slots import Batcher, Part
from pocketchat.engines.template import CHATML
from pocketchat.engines.types import ChatOptions, EngineInfo

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
        self._batcher: Batcher | None = None
        self._tok_lock: Any = nullcontext()
        note = ""
        if plan.parallel > 1:
            from mlx_lm.models.cache import make_prompt_cache

            why = batchable(make_prompt_cache(self._model))
            if why is None:
                self._batch = MlxBatch(self._model, self.device)
                self._batcher = Batcher(self._run_step, self._step)
                self._seqs: dict[int, MlxEngine] = {}
                self._tok_lock = threading.Lock()
            else:
                note = f"mlx answers one at a time with this model: {why}"
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
        self._own = [0, 0.0]  # prompt tokens processed before stream_generate, and seconds
        self._seen = [0, 0.0]  # prompt tokens stream_generate reported done, when
        self._last: Any = None  # the latest GenerationResponse
        self._sampling_now: SamplingSettings | None = None
        self._control: TokenControl | None = None
        if self._batch is not None:  # batched: this sequence's own counts, as on llama.cpp
            self._fed: list[float] = [0, 0.0]  # tokens this sequence fed this answer, since
            self._mark: tuple[int, float] | None = None  # (tokens, seconds) at the first token
            self._unfed: int | None = None  # the last sampled token, fed by _complete
            self._sampled: tuple[int, Any] = (0, None)  # what the last step sampled for it
            self._samplers: tuple[Any, list[Any]] = (None, [])
            self._history: list[int] = []  # what mlx-lm's processors see: prompt and answer
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
        if self._batcher is not None:  # no step after this
            self._batcher.close()
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
            raise EngineError(f"the chat template rejected the conversation: {exc}",
                              hint="Start a new conversation; if it happens again, report it.") from exc

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

    def _sampling(self, opts: ChatOptions) -> tuple[Any, list[Any]]:
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        s = self._sampling_now
        assert s is not None
        sampler = make_sampler(temp=s.temperature, top_p=s.top_p, min_p=s.min_p, top_k=s.top_k)
        bias = dict(s.logit_bias)
        if opts.ignore_eos:
            bias.update({t: float("-inf") for t in self._tok.eos_token_ids})
        processors = make_logits_processors(
            logit_bias=bias or None,
            repetition_penalty=s.repeat_penalty if s.repeat_penalty != 1.0 else None,
            presence_penalty=s.presence_penalty or None,
            frequency_penalty=s.frequency_penalty or None)
        if self._control is not None:
            processors.insert(0, self._controller(self._control))
        return sampler, processors

    def _controller(self, control: TokenControl) -> Any:
        """A logits processor running `control`: mlx-lm calls it for each position before
        sampling; from the second call on, the last token in `tokens` is the one just sampled."""
        mx = self._mx
        calls = [0]

        def process(tokens: Any, logits: Any) -> Any:
            if calls[0]:
                control.accept(int(tokens[-1].item()))
            calls[0] += 1
            row = np.array(logits[0].astype(mx.float32))
            control.before(row)
            return mx.array(row)[None].astype(logits.dtype)

        return process

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
        self._own, self._seen, self._last = [0, 0.0], [0, 0.0], None
        if self._batch is not None:
            self._fed, self._mark, self._unfed = [0, time.perf_counter()], None, None

    def _evaluate(self, tokens: list[int]) -> None:
        """Process `tokens` into the cache (no sampling), in batches, cancellable between them."""
        if self._batcher is not None:  # in the batcher's steps, a piece at a time
            if self._cancel.is_set():
                raise Cancelled
            self._feed(tokens)
            return
        mx, cache = self._mx, self.cache
        with mx.stream(self._stream):
            for i in range(0, len(tokens), self._step):
                if self._cancel.is_set():
                    raise Cancelled
                t0 = time.perf_counter()
                part = tokens[i: i + self._step]
                self._model(mx.array(part)[None], cache=self.state.layers)
                mx.eval([c.state for c in self.state.layers])
                cache.tokens.extend(part)
                self._own[:] = [self._own[0] + len(part), self._own[1] + time.perf_counter() - t0]
        mx.clear_cache()

    def _generate(self, tokens: list[int], opts: ChatOptions, max_new: int) -> Iterator[Step]:
        if self._batcher is not None:
            yield from self._generate_batched(tokens, opts, max_new)
            return
        from mlx_lm.generate import stream_generate

        cache = self.cache
        sampler, processors = self._sampling(opts)
        base = len(cache.tokens)
        t_rest = time.perf_counter()

        def progress(done: int, total: int) -> None:
            if done < total:  # at done == total the first answer token is in the cache
                del cache.tokens[base:]
                cache.tokens.extend(tokens[:done])
                self._seen[:] = [done, time.perf_counter() - t_rest]
                if self._cancel.is_set():
                    raise Cancelled

        gen = stream_generate(
            self._model, self._tok, tokens, max_tokens=max_new, sampler=sampler,
            logits_processors=processors or None, prompt_cache=self.state.layers,
            prefill_step_size=self._step, prompt_progress_callback=progress,
            stream=self._stream,
        )
        try:
            for resp in gen:
                if self._last is None:
                    cache.tokens[base:] = tokens
                self._last = resp
                cache.tokens.append(resp.token)  # mlx-lm has fed every token it returns
                logprob = self._control.logprob(resp.token) if self._control else None
                yield Step(resp.text, resp.finish_reason, logprob)
                if resp.finish_reason is not None:
                    return
        finally:
            gen.close()

    def _timing(self) -> Timing:
        if self._batch is not None:  # this sequence's own figures
            n, secs = int(self._fed[0]), time.perf_counter() - self._fed[1]
            p_n, p_s = self._mark if self._mark is not None else (n, secs)
            return Timing(prompt_tokens=p_n, prompt_seconds=p_s, generated_tokens=n - p_n,
                          decode_seconds=secs - p_s,
                          peak_memory_bytes=int(self._mx.get_peak_memory()))
        p_tok, p_sec = self._own
        g_tok, g_sec = 0, 0.0
        last = self._last
        if last is not None:
            p_tok += last.prompt_tokens
            p_sec += last.prompt_tokens / last.prompt_tps if last.prompt_tps > 0 else 0.0
            g_tok = last.generation_tokens
            g_sec = g_tok / last.generation_tps if last.generation_tps > 0 else 0.0
        else:
            p_tok += self._seen[0]
            p_sec += self._seen[1]
        return Timing(prompt_tokens=p_tok, prompt_seconds=p_sec, generated_tokens=g_tok,
                      decode_seconds=g_sec, peak_memory_bytes=int(self._mx.get_peak_memory()))

    # -- several sequences decoded together (plan.parallel > 1) --------------------------------

    def _feed(self, tokens: Sequence[int], sample: bool = False) -> Any:
        """Feed `tokens` to this sequence's cache in the batcher's steps; with `sample`, the
        (token, logprob) sampled from the last one's logits."""
        if not tokens:
            return None
        result = self._feed_batched(tokens, self._take_sampled if sample else None)
        self._fed[0] += len(tokens)
        return result

    def _take_sampled(self, _index: int) -> tuple[int, Any]:
        return self._sampled

    def _run_step(self, parts: list[Part]) -> int:
        """One batcher step, on the MLX thread: prompt pieces on their own caches, the
        decoding sequences' tokens in one call over the batch, each sampling its row."""
        return self._batch.call(self._step_parts, parts)  # type: ignore[union-attr]

    def _step_parts(self, parts: list[Part]) -> int:
        mx = self._mx
        rows: list[tuple[MlxEngine, int]] = []
        for work, start, n in parts:
            engine = self._seqs[work.seq]
            if work.sample is None:
                layers = engine.state.layers  # its own (out of the batch, if it was in)
                self._model(mx.array(work.tokens[start: start + n])[None], cache=layers)
                mx.eval([c.state for c in layers])
            else:
                rows.append((engine, work.tokens[start]))
        if rows:
            logits = self._batch.decode([e.state for e, _ in rows], [t for _, t in rows])  # type: ignore[union-attr]
            sampled = [engine._sample_row(token, row) for (engine, token), row in zip(rows, logits)]
            mx.eval(sampled)  # every row's token in one evaluation
            for (engine, _), token in zip(rows, sampled):
                chosen = int(token.item())
                engine._sampled = (chosen, engine._control.logprob(chosen)
                                   if engine._control else None)
        return 0

    def _sample_row(self, fed: int, logits: Any) -> Any:
        """The next token (an array, not yet evaluated) from this sequence's logits row, after
        `fed` was fed: mlx-lm's processors (over the prompt and answer so far) and sampler, as
        in its own loop."""
        mx = self._mx
        sampler, processors = self._samplers
        if processors:
            self._history.append(fed)
            tokens = mx.array(self._history)
            for processor in processors:
                logits = processor(tokens, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return sampler(logprobs)

    def _generate_batched(self, tokens: list[int], opts: ChatOptions, max_new: int
                          ) -> Iterator[Step]:
        """The prompt's rest, then each token in a batcher step with the other sequences."""
        assert self._batcher is not None and self._batch is not None
        with self._batcher.member(self._seq):
            self._evaluate(tokens[:-1])
            self._samplers = self._batch.call(self._sampling, opts)
            self._history = list(tokens[:-1])
            detok = self._tok.detokenizer
            ends = self._tok.eos_token_ids
            token, logprob = self._feed(tokens[-1:], sample=True)
            n = 0
            while True:
                if self._mark is None:  # the first token: what came before is prompt processing
                    self._mark = (int(self._fed[0]), time.perf_counter() - self._fed[1])
                n += 1
                self._unfed = token
                if token in ends:
                    detok.finalize()
                    yield Step(detok.last_segment, "stop", logprob)
                    return
                detok.add_token(token)
                if n >= max_new:
                    detok.finalize()
                    yield Step(detok.last_segment, "length", logprob)
                    return
                yield Step(detok.last_segment, None, logprob)
                self._unfed = None
                token, logprob = self._feed([token], sample=True)

    def _complete(self) -> None:
        """Batched: feed the last sampled token (counted, and cached for the next turn; mlx-lm's
        own loop has fed every token it returned)."""
        if self._batch is None or self._unfed is None or len(self.cache.tokens) >= self.n_ctx:
            return
        token, self._unfed = self._unfed, None
        try:
            self._feed([token])
        except (Cancelled, EngineError):
            pass
