"""Which weights llama.cpp's CPU backend keeps a repacked copy of, on which CPU. Pure functions.

On the CPU, llama.cpp (the version llama-cpp-python 0.3.36 vendors: ggml-cpu/repack.cpp,
`ggml_repack_get_optimal_repack_type`) moves every weight a matrix product reads whole, of a
type it has an interleaved kernel for on this CPU and with rows in multiples of 8, into a
"CPU_REPACK" buffer: anonymous memory holding an interleaved copy. The file's pages of those
weights are read once while loading and never again (reclaimable page cache), so a load holds
the repacked weights as anonymous memory and the rest as a file mapping; what it needs in RAM
to decode at full speed is about the same either way, but the repacked part cannot be paged
out. The token embeddings are never repacked (a row lookup, not a product).

- x86 with AVX2: Q4_0, Q4_K, IQ4_NL, MXFP4; with AVX-512F also Q2_K.
- ARM with the dot-product extension: Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL, MXFP4, Q1_0.
- Where llama.cpp offers AMX buffers (amx_int8), pocketchat loads without the extra buffer
  types (engines/llamacpp/load.py: they crash on some of those machines): nothing is repacked.

(llama.cpp checks the compile-time flags of its CPU backend; pip builds it for the CPU it runs
on, so the probe's flags stand for them.)
"""

from __future__ import annotations

from typing import Iterable

from pocketchat.types import HardwareProfile

# ggml_type numbers (ggml.h)
Q4_0, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_M, IQ2_XXS = 2, 8, 10, 11, 12, 13, 14, 29, 16
IQ4_NL, MXFP4, Q1_0 = 20, 39, 41

_X86_AVX2 = frozenset({Q4_0, Q4_K, IQ4_NL, MXFP4})
_X86_AVX512 = _X86_AVX2 | {Q2_K}
_ARM_DOTPROD = frozenset({Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL, MXFP4, Q1_0})

# The share of a POCKET build's bytes in each ggml type, for a build whose header is not known:
# llama.cpp's quantizer rules (llama-quant.cpp) applied to POCKET's tensor table
# (benchmarks/pocket_gguf.py computes them; tests/test_repack.py checks these against it).
# The token embeddings (never repacked) are left out; F32 norms and routers too.
POCKET_TYPE_SHARES: dict[str, dict[int, float]] = {
    "Q2_K": {Q2_K: 0.5646, Q3_K: 0.3610, Q4_K: 0.0224, Q6_K: 0.0323},
    "IQ1_M": {IQ1_M: 0.8565, Q2_K: 0.0322, Q4_K: 0.0351, Q5_K: 0.0425, IQ2_XXS: 0.0026},
    "Q3_K_M": {Q3_K: 0.5705, Q4_K: 0.3628, Q5_K: 0.0235, Q6_K: 0.0249},
    "Q4_K_M": {Q4_K: 0.7442, Q6_K: 0.2381},
}


def repacked_types(profile: HardwareProfile) -> frozenset[int]:
    """The ggml types whose matrix weights llama.cpp repacks on this machine's CPU."""
    flags = set(profile.cpu_flags)
    if "amx_int8" in flags:
        return frozenset()
    if profile.arch in ("arm64", "aarch64"):
        return _ARM_DOTPROD if "dotprod" in flags or profile.os == "darwin" else frozenset()
    if "avx512f" in flags:
        return _X86_AVX512
    return _X86_AVX2 if "avx2" in flags else frozenset()


def repacked_bytes(type_bytes: Iterable[tuple[int, int]], types: frozenset[int]) -> int:
    """Bytes of the weights (ggml type, bytes) that are repacked when `types` are."""
    return sum(b for t, b in type_bytes if t in types)


def pocket_type_bytes(quant: str, size_bytes: int) -> tuple[tuple[int, int], ...]:
    """(ggml type, bytes) of a catalog POCKET build from its quant's shares; () when unknown."""
    shares = POCKET_TYPE_SHARES.get(quant, {})
    return tuple((t, int(size_bytes * s)) for t, s in shares.items())
