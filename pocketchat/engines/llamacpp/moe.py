"""MoE experts on the CPU: llama.cpp's tensor buffer-type overrides (`-ot`, `--n-cpu-moe`).

A sparse MoE reads only the active experts per token, so the expert weights (about 94% of
POCKET) can live in system RAM and run on the CPU while attention, the router and the shared
expert stay on the GPU. llama.cpp does this with a NULL-terminated array of
`{regex pattern, buffer type}` pairs in `llama_model_params.tensor_buft_overrides`; any tensor
whose name matches a pattern is allocated in that buffer type. The high-level `Llama` class
does not expose the field, so this module builds the array (and keeps it alive: llama.cpp keeps
the pointer until the model is loaded).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pocketchat.rpc.ggml import DEVICE_CPU, binding

# The routed experts only, never the shared expert (`ffn_*_shexp`) or the router (`ffn_gate_inp`):
# separate gate/up/down tensors, the merged gate_up form, and the "chexps" variant.
EXPERT_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch)?exps"


def expert_patterns(n_layers: int | None = None) -> list[str]:
    """Patterns for the experts of every layer (None) or of the first `n_layers` layers only.

    The per-layer form is `--n-cpu-moe N`: keep the experts of the first N layers on the CPU,
    offload the rest with their layers.
    """
    if n_layers is None:
        return [EXPERT_PATTERN]
    if n_layers < 0:
        raise ValueError(f"n_layers must be >= 0, not {n_layers}")
    return [rf"^blk\.{i}{EXPERT_PATTERN}" for i in range(n_layers)]


def matching(names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The tensor names the patterns select (llama.cpp uses std::regex_search; so does `re`)."""
    compiled = [re.compile(p) for p in patterns]
    return [n for n in names if any(c.search(n) for c in compiled)]


class TensorBuftOverride(ctypes.Structure):
    """`struct llama_model_tensor_buft_override { const char * pattern; ggml_backend_buffer_type_t buft; }`."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass
class BufferOverrides:
    """A NULL-terminated override array and the objects it points into (keep this alive)."""

    patterns: list[str]
    buft: int
    buft_name: str
    array: Any = field(repr=False)
    _keep: list[bytes] = field(default_factory=list, repr=False)

    @property
    def address(self) -> int:
        """The value for `llama_model_params.tensor_buft_overrides` (a `void *` field)."""
        return ctypes.addressof(self.array)

    def __len__(self) -> int:
        return len(self.patterns)


def build_overrides(patterns: Sequence[str], buft: int, buft_name: str = "CPU",
                    *, limit: int | None = None) -> BufferOverrides:
    """The C array for `patterns`, all mapped to the buffer type at address `buft`."""
    if not buft:
        raise ValueError("the buffer type pointer is NULL")
    if limit is not None and len(patterns) > limit:
        raise ValueError(f"{len(patterns)} overrides, llama.cpp accepts at most {limit}")
    keep = [p.encode("utf-8") for p in patterns]
    array = (TensorBuftOverride * (len(keep) + 1))()
    for i, raw in enumerate(keep):
        array[i].pattern = raw
        array[i].buft = buft
    array[len(keep)].pattern = None  # the sentinel: llama.cpp stops at the first NULL pattern
    array[len(keep)].buft = None
    return BufferOverrides(list(patterns), buft, buft_name, array, keep)


def cpu_buffer_type() -> tuple[int, str]:
    """The CPU device's buffer type (address, name) from ggml's device registry.

    This is what `ggml_backend_cpu_buffer_type()` returns, found the way `-ot ...=CPU` finds it,
    so it works whether the CPU backend is linked in or loaded as a plug-in.
    """
    lib = binding()
    dev = lib.device_by_kind(DEVICE_CPU)
    if not dev:
        raise RuntimeError("llama.cpp has no CPU device registered")
    buft = lib.buffer_type(dev)
    if not buft:
        raise RuntimeError("llama.cpp's CPU device has no buffer type")
    return buft, lib.buffer_type_name(buft) or "CPU"


def cpu_extra_buffer_types() -> list[str]:
    """Names of the CPU backend's extra weight buffer types (e.g. CPU_REPACK, AMX)."""
    lib = binding()
    dev = lib.device_by_kind(DEVICE_CPU)
    reg = lib.device_backend(dev) if dev else None
    get = lib.proc(reg, "ggml_backend_dev_get_extra_bufts", ctypes.POINTER(ctypes.c_void_p),
                   ctypes.c_void_p) if reg else None
    if get is None:
        return []
    arr = get(dev)
    names: list[str] = []
    i = 0
    while arr and arr[i]:
        names.append(lib.buffer_type_name(arr[i]) or "?")
        i += 1
    return names


def cpu_expert_overrides(llama_cpp: Any, n_layers: int | None = None) -> BufferOverrides:
    """The override array that keeps the experts (all, or of the first n layers) on the CPU."""
    buft, name = cpu_buffer_type()
    limit = int(llama_cpp.llama_max_tensor_buft_overrides())
    return build_overrides(expert_patterns(n_layers), buft, name, limit=limit)


OVERRIDE_LOG = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)")


def overridden_tensors(log_lines: Iterable[str]) -> dict[str, str]:
    """Tensor -> buffer type, from llama.cpp's load log: proof the overrides were applied."""
    found: dict[str, str] = {}
    for line in log_lines:
        m = OVERRIDE_LOG.search(line)
        if m:
            found[m.group(1)] = m.group(2)
    return found
