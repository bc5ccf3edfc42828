"""Loading a GGUF into llama-cpp-python with every setting of the plan, quietly and safely.

- `import_llama()`: the lazy import, with a clear error when the backend is missing.
- `LlamaLog`: llama.cpp's log, captured instead of printed (the TUI owns the terminal); its
  last lines explain a failed load, and its override lines prove the experts went to the CPU.
- `params_hook` (`model_params_hook`, `context_params_hook`): `Llama()` builds
  `llama_model_params` itself and has no argument for `tensor_buft_overrides` or a progress
  callback; the hook fills them in the params it builds. The same for `llama_context_params`
  (`n_seq_max`, `kv_unified`:
  a plan with `parallel` N gets N sequences, each with its own `n_ctx` cells: with
  `kv_unified` false llama.cpp gives each sequence `n_ctx / n_seq_max`, and a recurrent or
  hybrid model keeps one recurrent state per sequence).
- `new_llama(path, **kwargs)`: THE one way anything in the tree (the engine, tests, benchmarks)
  builds a `llama_cpp.Llama`: llama-cpp-python's own constructor with the engine's guards on its
  model params (`guard_model_params`: today AMX). `tests/test_layout.py` fails on any other
  `Llama(` call, so a bare benchmark anchor or a test's reference model cannot crash where the
  engine does not.
- `load_llama(plan, path, ...)`: all of the above, returning the `Llama` and what was applied.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pocketchat.errors import BackendMissing, EngineError
from pocketchat.engines.llamacpp import moe
from pocketchat.modelfile.gguf import GGUFInfo
from pocketchat.types import LoadPlan, runs_head

ProgressFn = Callable[[str, float], None]


# KV cache types a plan may name -> ggml type ids (stable in ggml.h).
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
            "iq4_nl": 20, "bf16": 30}  # fmt: skip

_hook_lock = threading.RLock()  # the two hooks nest


def import_llama() -> Any:
    try:
        import llama_cpp
        import llama_cpp.llama  # noqa: F401
    except ImportError as exc:
        raise BackendMissing(
            f"llama-cpp-python is not installed or cannot load ({exc})",
            hint="Install it with: pip install llama-cpp-python",
        ) from exc
    return llama_cpp


class LlamaLog:
    """Collects llama.cpp's log lines (the last `keep`); installed once per process."""

    _installed: "LlamaLog | None" = None

    def __init__(self, llama_cpp: Any, keep: int = 400) -> None:
        self.lines: deque[str] = deque(maxlen=keep)
        self.recording: list[str] | None = None
        self._partial = ""

        def on_log(level: int, text: bytes, _user: Any) -> None:
            self._add(text.decode("utf-8", errors="replace"))

        self._callback = llama_cpp.llama_log_callback(on_log)  # keep the C callback alive
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))

    @classmethod
    def install(cls, llama_cpp: Any) -> "LlamaLog":
        if cls._installed is None:
            cls._installed = cls(llama_cpp)
        return cls._installed

    def _add(self, text: str) -> None:
        text = self._partial + text
        *done, self._partial = text.split("\n")
        for line in done:
            self.lines.append(line)
            if self.recording is not None:
                self.recording.append(line)

    @contextlib.contextmanager
    def record(self) -> Iterator[list[str]]:
        """Every line logged inside the block (not just the last `keep`)."""
        self.recording = out = []
        try:
            yield out
        finally:
            self.recording = None

    def errors(self, lines: list[str] | None = None) -> list[str]:
        src = list(self.lines if lines is None else lines)
        bad = [s.strip() for s in src if any(w in s.lower() for w in ("error", "failed", "unknown"))]
        return [s for s in bad if s][-3:]


@contextlib.contextmanager
def params_hook(default: str, setup: Callable[[Any], None]) -> Iterator[None]:
    """While inside, every params struct that `Llama()` gets from llama.cpp's `default` function
    (`llama_model_default_params`, `llama_context_default_params`) passes through `setup`."""
    import llama_cpp.llama as llama_module

    target = llama_module.llama_cpp  # the low-level module `Llama` calls
    with _hook_lock:
        original = getattr(target, default)

        def patched() -> Any:
            params = original()
            setup(params)
            return params

        setattr(target, default, patched)
        try:
            yield
        finally:
            setattr(target, default, original)


def model_params_hook(setup: Callable[[Any], None]) -> contextlib.AbstractContextManager[None]:
    """Every `llama_model_params` that `Llama()` creates passes through `setup`."""
    return params_hook("llama_model_default_params", setup)


def context_params_hook(setup: Callable[[Any], None]) -> contextlib.AbstractContextManager[None]:
    """Every `llama_context_params` that `Llama()` creates passes through `setup`."""
    return params_hook("llama_context_default_params", setup)


@functools.lru_cache(maxsize=1)
def amx_offered() -> bool:
    """Whether this CPU backend offers llama.cpp's AMX weight buffers."""
    return "AMX" in moe.cpu_extra_buffer_types()


def guard_model_params(params: Any, *, repack: bool = True) -> None:
    """The engine's guards on a `llama_model_params`, whoever builds the model.

    AMX: llama.cpp's AMX weight buffers run a tile instruction on an invalid tile configuration
    on Sapphire Rapids class machines (SIGILL or a segfault in ggml_backend_amx_mul_mat;
    ggml-org/llama.cpp#20824, unfixed in 0.3.36). Where AMX is offered, no extra weight buffer
    types: slower prompts (the CPU repack goes too; 3-5% of decode at POCKET's size), no crash.
    `repack=False` is llama.cpp's `--no-repack` everywhere.
    """
    params.use_extra_bufts = bool(params.use_extra_bufts) and repack and not amx_offered()


def new_llama(path: Path | str, *, repack: bool = True,
              model_setup: Callable[[Any], None] | None = None,
              context_setup: Callable[[Any], None] | None = None, n_rs_seq: int = 0,
              **kwargs: Any) -> Any:
    """A `llama_cpp.Llama(model_path=path, verbose=False, **kwargs)` with the engine's guards.

    The only place in the tree that calls `Llama(`: tests and benchmarks build their reference
    or bare-anchor models here too, so they carry the same guards and nothing else of
    pocketchat's. `model_setup` / `context_setup` see the params `Llama()` builds (fields it has
    no argument for); the guards are applied after `model_setup`, so it cannot undo them.
    `n_rs_seq`: recurrent-state snapshots per sequence, for rolling back a rejected draft
    (`rollback.py`; llama.cpp ignores it for architectures it cannot roll back).
    """
    llama_cpp = import_llama()

    def setup(params: Any) -> None:
        if model_setup is not None:
            model_setup(params)
        guard_model_params(params, repack=repack)

    def setup_context(params: Any) -> None:
        if context_setup is not None:
            context_setup(params)
        if n_rs_seq:
            params.n_rs_seq = max(0, int(n_rs_seq))

    kwargs.setdefault("verbose", False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(model_params_hook(setup))
        if context_setup is not None or n_rs_seq:
            stack.enter_context(context_params_hook(setup_context))
        return llama_cpp.Llama(model_path=str(path), **kwargs)


@dataclass
class Loaded:
    llm: Any
    overrides: moe.BufferOverrides | None
    overridden: dict[str, str] = field(default_factory=dict)  # tensor -> buffer type
    log: list[str] = field(default_factory=list)
    mtp: bool = False  # the GGUF's MTP block was loaded (drafts from it: `mtp.py`)


def load_llama(plan: LoadPlan, path: Path, info: GGUFInfo, *,
               on_progress: ProgressFn | None = None) -> Loaded:
    """A `Llama` for `path` with the plan's settings; EngineError with llama.cpp's reason."""
    llama_cpp = import_llama()
    log = LlamaLog.install(llama_cpp)
    overrides = None
    if plan.cpu_moe and info.expert_tensors:
        overrides = moe.cpu_expert_overrides(llama_cpp)
    elif plan.n_cpu_moe > 0 and info.expert_tensors:  # --n-cpu-moe N: the first N layers' experts
        overrides = moe.cpu_expert_overrides(llama_cpp, plan.n_cpu_moe)
    kv = plan.kv_type.lower()
    if kv not in KV_TYPES:
        raise EngineError(f"unknown KV cache type {plan.kv_type!r}; use one of {', '.join(KV_TYPES)}")

    def progress(fraction: float, _user: Any) -> bool:
        if on_progress is not None:
            on_progress("loading", float(fraction))
        return True

    progress_cb = llama_cpp.llama_progress_callback(progress)

    pool = _rpc_devices(plan)  # helpers' devices (rpc/client.py), kept alive with the model
    load_mtp = runs_head(plan.draft, info.mtp_layers, plan.parallel)  # else llama.cpp skips it

    def setup(params: Any) -> None:
        params.load_mtp = load_mtp
        if pool is not None:
            params.devices = ctypes.addressof(pool)
        if overrides is not None:
            params.tensor_buft_overrides = overrides.address
        params.progress_callback = progress_cb

    n_ctx = plan.n_ctx  # the plan owns the context (select.fit.context_steps) and the threads
    n_batch = max(1, min(plan.n_batch, n_ctx))
    seqs = max(1, plan.parallel)

    def setup_context(params: Any) -> None:
        if seqs > 1:
            params.n_seq_max = seqs
            params.kv_unified = False  # each sequence its own n_ctx cells (llama-context.cpp)

    with log.record() as lines:
        try:
            llm = new_llama(
                path,
                model_setup=setup,
                context_setup=setup_context,
                n_gpu_layers=plan.n_gpu_layers,
                use_mmap=plan.use_mmap,
                n_ctx=n_ctx * seqs,
                n_batch=n_batch,
                n_ubatch=n_batch,
                n_threads=plan.n_threads,
                n_threads_batch=plan.n_threads_batch,
                flash_attn=plan.flash_attn,
                n_rs_seq=plan.draft_depth if plan.draft != "off" else 0,
                type_k=KV_TYPES[kv],
                type_v=KV_TYPES[kv],
                tensor_split=list(plan.rpc_layers) if len(plan.rpc_layers) > 1 else None,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise _load_error(path, exc, log.errors(lines)) from exc
    if overrides is not None:
        llm._pocketchat_overrides = overrides  # the C array must outlive the model
    if pool is not None:
        from pocketchat.rpc.client import tune_helper_sockets

        llm._pocketchat_devices = pool
        tune_helper_sockets(plan.rpc_servers)
    return Loaded(llm, overrides, moe.overridden_tensors(lines), list(lines), load_mtp)


def _rpc_devices(plan: LoadPlan) -> Any:
    """The NULL-terminated device array for a pooled plan, or None."""
    if not plan.rpc_servers:
        return None
    from pocketchat.rpc.client import device_array, rpc_devices

    return device_array(rpc_devices(plan.rpc_servers))


def _load_error(path: Path, exc: Exception, reasons: list[str]) -> Exception:
    from pocketchat.engines.loaderror import load_error

    return load_error("llama.cpp", path.name, "; ".join(reasons) or str(exc), exc)
