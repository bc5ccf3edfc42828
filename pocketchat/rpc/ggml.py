"""llama-cpp-python's ggml libraries: where they are, whether the RPC backend is there, and the
one ctypes binding of ggml's backend registry (RPC devices and servers, MoE placement) and of
its quantizer (`Ggml.quantize`: benchmarks/pocket_scale.py writes valid quantized blocks with it).

The lookups read file names only; `binding()` loads nothing that `import llama_cpp` has not
loaded already (the same libraries, opened again for their registry functions).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pocketchat.errors import BackendMissing, RpcUnavailable

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_CPU, DEVICE_GPU, DEVICE_IGPU, DEVICE_ACCEL = 0, 1, 2, 3

_VP, _SIZE, _STR = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
# name -> (restype, argtypes): the registry functions this binding calls (ggml-backend.h)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "ggml_backend_reg_by_name": (_VP, [_STR]),
    "ggml_backend_reg_get_proc_address": (_VP, [_VP, _STR]),
    "ggml_backend_reg_dev_count": (_SIZE, [_VP]),
    "ggml_backend_reg_dev_get": (_VP, [_VP, _SIZE]),
    "ggml_backend_dev_count": (_SIZE, []),
    "ggml_backend_dev_get": (_VP, [_SIZE]),
    "ggml_backend_dev_by_type": (_VP, [ctypes.c_int]),
    "ggml_backend_dev_name": (_STR, [_VP]),
    "ggml_backend_dev_description": (_STR, [_VP]),
    "ggml_backend_dev_type": (ctypes.c_int, [_VP]),
    "ggml_backend_dev_memory": (None, [_VP, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)]),
    "ggml_backend_dev_backend_reg": (_VP, [_VP]),
    "ggml_backend_dev_buffer_type": (_VP, [_VP]),
    "ggml_backend_buft_name": (_STR, [_VP]),
    # the quantizer (ggml.h); `type` is enum ggml_type, the numbers of gguf.GGMLQuantizationType
    "ggml_quantize_chunk": (_SIZE, [ctypes.c_int, _VP, _VP, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int64, _VP]),
    "ggml_quantize_requires_imatrix": (ctypes.c_bool, [ctypes.c_int]),
    "ggml_row_size": (_SIZE, [ctypes.c_int, ctypes.c_int64]),
    "ggml_blck_size": (ctypes.c_int64, [ctypes.c_int]),
    "ggml_type_name": (_STR, [ctypes.c_int]),
}


# -- where the libraries are (file names only) ------------------------------------------------


def lib_dir() -> Path | None:
    """The installed llama_cpp's `lib` folder, found without importing it; None if absent."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        lib = Path(folder) / "lib"
        if lib.is_dir():
            return lib
    return None


def library_names() -> list[str] | None:
    """File names in the installed llama_cpp's `lib` folder; None if it is not installed."""
    lib = lib_dir()
    if lib is None:
        return None
    try:
        return sorted(os.listdir(lib))
    except OSError:
        return None


def rpc_library() -> Path | None:
    """The installed llama-cpp-python's libggml-rpc, found without loading anything."""
    lib = lib_dir()
    found = [n for n in library_names() or [] if "ggml-rpc" in n]
    return lib / found[0] if lib and found else None


def require_rpc() -> None:
    """RpcUnavailable (with the exact reinstall command) unless llama.cpp has the RPC backend."""
    if rpc_library() is None:
        raise RpcUnavailable("the installed llama-cpp-python was built without the RPC backend, "
                             "so it cannot pool machines (--rpc, rpc-server)")


# -- the binding ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One ggml device: its handle (`ggml_backend_dev_t`), what it is, and its memory."""

    handle: int
    name: str
    description: str
    kind: int  # DEVICE_CPU, DEVICE_GPU, ...
    free_bytes: int
    total_bytes: int


class Ggml:
    """ggml's backend registry, from the libraries llama_cpp loads (see `binding()`)."""

    def __init__(self) -> None:
        import llama_cpp  # loads libllama and, through it, the ggml libraries

        lib = Path(llama_cpp.__file__).parent / "lib"
        self._libs = [self._open(lib, name) for name in ("ggml", "ggml-base")]
        self._fn: dict[str, Any] = {}
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = self._symbol(name)
            fn.restype, fn.argtypes = restype, argtypes
            self._fn[name] = fn

    @staticmethod
    def _open(lib: Path, name: str) -> ctypes.CDLL:
        from llama_cpp._ctypes_extensions import load_shared_library

        try:
            return load_shared_library(name, lib)
        except (OSError, RuntimeError, FileNotFoundError) as exc:
            raise BackendMissing(f"cannot find the ggml libraries of llama-cpp-python ({exc})",
                                 hint="Reinstall llama-cpp-python.") from exc

    def _symbol(self, name: str) -> Any:
        for lib in self._libs:  # the registry lives in libggml, devices and buffers in libggml-base
            try:
                return getattr(lib, name)
            except AttributeError:
                continue
        raise BackendMissing(f"llama.cpp's ggml libraries have no {name}",
                             hint="Reinstall llama-cpp-python.")

    # -- backends (registries) -------------------------------------------------------------

    def backend(self, name: str) -> int | None:
        """The registered backend called `name` ("CPU", "RPC", "CUDA" ...), or None."""
        return self._fn["ggml_backend_reg_by_name"](name.encode())

    def backend_devices(self, reg: int) -> list[int]:
        """The devices a backend offers."""
        return [self._fn["ggml_backend_reg_dev_get"](reg, i)
                for i in range(self._fn["ggml_backend_reg_dev_count"](reg))]

    def proc(self, reg: int, name: str, restype: Any, *argtypes: Any) -> Callable[..., Any] | None:
        """A backend's extra function `name` (`ggml_backend_reg_get_proc_address`), or None."""
        addr = self._fn["ggml_backend_reg_get_proc_address"](reg, name.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr) if addr else None

    # -- devices ---------------------------------------------------------------------------

    def devices(self) -> list[Device]:
        """Every device of every registered backend."""
        return [self.device(self._fn["ggml_backend_dev_get"](i))
                for i in range(self._fn["ggml_backend_dev_count"]())]

    def device(self, handle: int) -> Device:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._fn["ggml_backend_dev_memory"](handle, ctypes.byref(free), ctypes.byref(total))
        return Device(handle, self._fn["ggml_backend_dev_name"](handle).decode(),
                      self._fn["ggml_backend_dev_description"](handle).decode(),
                      self._fn["ggml_backend_dev_type"](handle), free.value, total.value)

    def device_by_kind(self, kind: int) -> int | None:
        """The first device of `kind` (DEVICE_CPU ...), or None."""
        return self._fn["ggml_backend_dev_by_type"](kind)

    def device_backend(self, dev: int) -> int | None:
        """The backend (registry) a device belongs to."""
        return self._fn["ggml_backend_dev_backend_reg"](dev)

    def buffer_type(self, dev: int) -> int | None:
        """The device's default buffer type (`ggml_backend_buffer_type_t`)."""
        return self._fn["ggml_backend_dev_buffer_type"](dev)

    def buffer_type_name(self, buft: int) -> str | None:
        """A buffer type's name ("CPU", "CPU_REPACK", "CUDA0" ...), None when it has none."""
        name = self._fn["ggml_backend_buft_name"](buft)
        return name.decode() if name else None

    # -- the quantizer ---------------------------------------------------------------------

    def type_name(self, ggml_type: int) -> str:
        """ggml's name of a tensor type ("q2_K", "iq1_m" ...)."""
        return self._fn["ggml_type_name"](ggml_type).decode()

    def block_size(self, ggml_type: int) -> int:
        """Elements per quantized block (256 for the K and IQ types)."""
        return int(self._fn["ggml_blck_size"](ggml_type))

    def row_bytes(self, ggml_type: int, n: int) -> int:
        """Bytes of a row of `n` elements (a multiple of the block size) of that type."""
        return int(self._fn["ggml_row_size"](ggml_type, n))

    def needs_imatrix(self, ggml_type: int) -> bool:
        """Whether ggml refuses to quantize to that type without an importance matrix (IQ1_M ...)."""
        return bool(self._fn["ggml_quantize_requires_imatrix"](ggml_type))

    def quantize(self, ggml_type: int, rows: Any, imatrix: Any = None) -> bytes:
        """`rows` (a C-contiguous float32 numpy array, one row per line) quantized by ggml's own
        `ggml_quantize_chunk`; `imatrix`: one float32 weight per column, or None."""
        import numpy as np

        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2:
            raise ValueError("quantize takes a 2-D array of rows")
        nrows, n = rows.shape
        if n % self.block_size(ggml_type):
            raise ValueError(f"{n} columns is not a multiple of {self.type_name(ggml_type)}'s block")
        if imatrix is None and self.needs_imatrix(ggml_type):
            raise ValueError(f"{self.type_name(ggml_type)} needs an importance matrix")
        if imatrix is not None:
            imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
            if imatrix.shape != (n,):
                raise ValueError(f"the importance matrix has {imatrix.shape}, the rows {n} columns")
        out = ctypes.create_string_buffer(self.row_bytes(ggml_type, n) * nrows)
        written = self._fn["ggml_quantize_chunk"](
            ggml_type, rows.ctypes.data, out, 0, nrows, n,
            imatrix.ctypes.data if imatrix is not None else None)
        return out.raw[:written]


_binding: Ggml | None = None


def binding() -> Ggml:
    """The one `Ggml` of this process (BackendMissing when llama-cpp-python's libraries are not there)."""
    global _binding
    if _binding is None:
        _binding = Ggml()
    return _binding


def rpc_function(name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    """A function of llama.cpp's RPC backend (`ggml_backend_rpc_*`); RpcUnavailable if absent."""
    require_rpc()
    lib = binding()
    reg = lib.backend("RPC")
    if not reg:
        raise RpcUnavailable("llama.cpp has no RPC backend registered")
    fn = lib.proc(reg, name, restype, *argtypes)
    if fn is None:
        raise RpcUnavailable(f"llama.cpp's RPC backend has no {name}")
    return fn
