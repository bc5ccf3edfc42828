"""llama-cpp-python's ggml libraries: where they are, whether the RPC backend is there, and the
ctypes binding of ggml's backend registry."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
from pathlib import Path
from typing import Any

from pocketchat.errors import RpcUnavailable


def _lib_dir() -> Path | None:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        lib = Path(folder) / "lib"
        if lib.is_dir():
            return lib
    return None


def rpc_library() -> Path | None:
    """The installed llama-cpp-python's libggml-rpc, found without loading anything."""
    lib = _lib_dir()
    if lib is None:
        return None
    found = sorted(glob.glob(str(lib / "*ggml-rpc*")))
    return Path(found[0]) if found else None


def require_rpc() -> None:
    """RpcUnavailable (with the exact reinstall command) unless llama.cpp has the RPC backend."""
    if rpc_library() is None:
        raise RpcUnavailable("the installed llama-cpp-python was built without the RPC backend, "
                             "so it cannot pool machines (--rpc, rpc-server)")


class _Ggml:
    """The few ggml registry functions this module calls, from the libraries llama_cpp loads."""

    def __init__(self) -> None:
        import llama_cpp  # noqa: F401 - loads libllama and, through it, the ggml libraries

        lib = _lib_dir()
        names = ("libggml.so", "libggml.dylib", "ggml.dll")
        path = next((lib / n for n in names if lib and (lib / n).exists()), None)
        base = next((lib / n.replace("ggml", "ggml-base") for n in names
                     if lib and (lib / n.replace("ggml", "ggml-base")).exists()), None)
        if path is None or base is None:
            raise RpcUnavailable("cannot find the ggml libraries of llama-cpp-python")
        self.ggml, self.base = ctypes.CDLL(str(path)), ctypes.CDLL(str(base))
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self._sig(self.ggml, "ggml_backend_reg_by_name", vp, [ctypes.c_char_p])
        self._sig(self.ggml, "ggml_backend_dev_count", sz, [])
        self._sig(self.ggml, "ggml_backend_dev_get", vp, [sz])
        self._sig(self.base, "ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p])
        self._sig(self.base, "ggml_backend_reg_dev_count", sz, [vp])
        self._sig(self.base, "ggml_backend_reg_dev_get", vp, [vp, sz])
        self._sig(self.base, "ggml_backend_dev_name", ctypes.c_char_p, [vp])
        self._sig(self.base, "ggml_backend_dev_description", ctypes.c_char_p, [vp])
        self._sig(self.base, "ggml_backend_dev_type", ctypes.c_int, [vp])
        self._sig(self.base, "ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)])

    @staticmethod
    def _sig(lib: Any, name: str, restype: Any, argtypes: list) -> None:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes

    def rpc_proc(self, name: str, restype: Any, *argtypes: Any) -> Any:
        reg = self.ggml.ggml_backend_reg_by_name(b"RPC")
        if not reg:
            raise RpcUnavailable("llama.cpp has no RPC backend registered")
        addr = self.base.ggml_backend_reg_get_proc_address(reg, name.encode())
        if not addr:
            raise RpcUnavailable(f"llama.cpp's RPC backend has no {name}")
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr)


_ggml: _Ggml | None = None


def ggml() -> _Ggml:
    global _ggml
    if _ggml is None:
        require_rpc()
        _ggml = _Ggml()
    return _ggml
