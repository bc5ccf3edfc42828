"""Pooling machines through llama.cpp's RPC backend (ggml-rpc), from Python.

llama-cpp-python does not pass `rpc_servers` on, but a build with `-DGGML_RPC=on` ships
libggml-rpc and registers the "RPC" backend; everything here reaches it through ctypes:

- `probe_helper(endpoint)` (rpcwire.py): a small client of the RPC wire protocol: HELLO,
  DEVICE_COUNT, GET_DEVICE_MEMORY (the helper's memory), the round-trip time, and the
  throughput of a 4 MiB SET_TENSOR into a scratch buffer that is freed again. Pure Python
  sockets with timeouts: llama.cpp's own client aborts the process when a server cannot be
  reached, so nothing native touches a helper before this check passed.
- `rpc_devices(endpoints)`: `ggml_backend_rpc_add_server` through the registry's proc address;
  the devices go into `llama_model_params.devices` (engines/llamacpp/load.py).
- `serve(...)`: `ggml_backend_rpc_start_server` on this machine's GPU (or its CPU), as
  llama.cpp's rpc-server does; it never returns.
- `tune_helper_sockets(endpoints)`: keepalive and TCP_USER_TIMEOUT on the worker's connections
  to the helpers, so a dropped network ends a blocked read within seconds (ggml-rpc then aborts
  the worker process, which the parent reports).
- `PooledEngine`: the worker engine, with a crash that a missing helper explains turned into
  `HelperGone` (which helper, and what to do).

The RPC protocol has no authentication: listen on loopback, or on a network you trust.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import os
import socket
from pathlib import Path
from typing import Any, Iterator, Sequence

from pocketchat.engines.rpcwire import (  # noqa: F401 - the wire client, re-exported
    DEFAULT_PORT,
    RpcWire,
    is_loopback,
    parse_endpoints,
    probe_helper,
    reachable,
    split_endpoint,
)
from pocketchat.errors import EngineCrashed, HelperGone, HelperUnreachable, RpcUnavailable
from pocketchat.types import Helper

KEEPALIVE_IDLE_S = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 4000

SERVER_WARNING = (
    "WARNING: Host ('{host}') is != '127.0.0.1'\n"
    "         Never expose the RPC server to an open network!\n"
    "         This is an experimental feature and is not secure!"
)


# -- is the RPC backend there? --------------------------------------------------------------


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


def probe_helpers(endpoints: Sequence[str], *, timeout: float = 3.0) -> tuple[Helper, ...]:
    require_rpc()
    return tuple(probe_helper(ep, timeout=timeout) for ep in endpoints)


# -- the client side, in the worker ---------------------------------------------------------


def rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The ggml devices of every helper (each checked first: llama.cpp aborts on a dead one)."""
    lib = ggml()
    # ggml-rpc aborts the process when a helper goes away; by default ggml's abort first attaches
    # gdb for a backtrace, which takes seconds (measured ~6 s here). The parent explains the
    # abort instead, at once.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    add_server = lib.rpc_proc("ggml_backend_rpc_add_server", ctypes.c_void_p, ctypes.c_char_p)
    devices: list[int] = []
    for ep in endpoints:
        why = reachable(ep, timeout=3.0)
        if why:
            raise HelperUnreachable(why, endpoint=ep)
        reg = add_server(ep.encode())
        if not reg:
            raise HelperUnreachable(f"the helper at {ep} offers no device", endpoint=ep)
        for i in range(lib.base.ggml_backend_reg_dev_count(reg)):
            devices.append(lib.base.ggml_backend_reg_dev_get(reg, i))
    return devices


def device_array(devices: Sequence[int]) -> Any:
    """A NULL-terminated `ggml_backend_dev_t[]` for `llama_model_params.devices`."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


def tune_helper_sockets(endpoints: Sequence[str]) -> int:
    """Keepalive + TCP_USER_TIMEOUT on this process's TCP connections to the helpers (Linux).

    A helper whose network drops would leave llama.cpp blocked in recv() for minutes; with these
    the kernel fails the socket after a few seconds, ggml-rpc aborts, and the parent reports it.
    Returns how many sockets were tuned.
    """
    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):
        return 0
    wanted = {split_endpoint(ep) for ep in endpoints}
    addrs = set()
    for host, port in wanted:
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP):
                addrs.add((info[4][0], port))
    tuned = 0
    for name in os.listdir(fd_dir):
        try:
            s = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        try:
            if s.type != socket.SOCK_STREAM or s.getpeername()[:2] not in addrs:
                continue
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for opt, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", 1),
                               ("TCP_KEEPCNT", KEEPALIVE_COUNT), ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS)):
                if hasattr(socket, opt):
                    s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
            tuned += 1
        except OSError:
            continue
        finally:
            s.close()  # the duplicate only
    return tuned


# -- the server side ------------------------------------------------------------------------


def server_devices() -> list[tuple[int, str, str, int, int]]:
    """(device, name, description, free, total) to serve: the accelerators, else the CPU."""
    lib = ggml()
    devs = []
    for i in range(lib.ggml.ggml_backend_dev_count()):
        dev = lib.ggml.ggml_backend_dev_get(i)
        kind = lib.base.ggml_backend_dev_type(dev)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.base.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devs.append((kind, (dev, lib.base.ggml_backend_dev_name(dev).decode(),
                            lib.base.ggml_backend_dev_description(dev).decode(), free.value, total.value)))
    # ggml_backend_dev_type: 0 CPU, 1 GPU, 2 IGPU, 3 ACCEL (ggml-backend.h)
    gpus = [d for kind, d in devs if kind in (1, 2)]
    return gpus or [d for kind, d in devs if kind == 0][:1]


def serve(host: str, port: int, threads: int, cache_dir: str | None,
          devices: Sequence[tuple[int, str, str, int, int]]) -> None:
    """llama.cpp's RPC server on `devices`; blocks for ever (returns only if it cannot listen)."""
    start = ggml().rpc_proc("ggml_backend_rpc_start_server", None, ctypes.c_char_p, ctypes.c_char_p,
                            ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
    arr = (ctypes.c_void_p * len(devices))(*[d[0] for d in devices])
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads,
          len(devices), arr)


# -- the engine -----------------------------------------------------------------------------


class PooledEngine:
    """A worker engine whose model is split over helpers; a crash a helper explains is `HelperGone`."""

    def __init__(self, inner: Any, endpoints: Sequence[str]) -> None:
        self.inner = inner
        self.endpoints = tuple(endpoints)
        self.gone: str | None = None

    @property
    def info(self) -> Any:
        return self.inner.info

    @property
    def pid(self) -> int | None:
        return getattr(self.inner, "pid", None)

    def chat(self, messages: Sequence[Any], options: Any = None) -> Iterator[Any]:
        return self._chat(self.inner.chat(messages, options))

    def _chat(self, chunks: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from chunks
        except EngineCrashed as exc:
            raise self.explain(exc) from exc

    def explain(self, exc: EngineCrashed) -> EngineCrashed:
        """`HelperGone` naming the helper that no longer answers, or `exc` when all do."""
        for ep in self.endpoints:
            why = reachable(ep)
            if why:
                self.gone = ep
                return HelperGone(f"the helper at {ep} went away mid-answer ({why}); "
                                  "the model could not go on", endpoint=ep, exitcode=exc.exitcode)
        if "RPC server" in exc.message:
            self.gone = self.endpoints[0] if len(self.endpoints) == 1 else "a helper"
            return HelperGone(f"the connection to {self.gone} broke mid-answer; the model could not "
                              "go on", endpoint=self.gone, exitcode=exc.exitcode)
        return exc

    def cancel(self) -> None:
        self.inner.cancel()

    def close(self) -> None:
        self.inner.close()


def open_pooled(plan: Any, path: Path, *, name: str | None = None, **kwargs: Any) -> PooledEngine:
    """The worker engine for a pooled plan, with helper failures at load time explained too."""
    from pocketchat.engines.worker import WorkerEngine

    endpoints = plan.rpc_servers
    for ep in endpoints:  # fail here, clearly, rather than as an abort inside the worker
        why = reachable(ep, timeout=3.0)
        if why:
            raise HelperUnreachable(why, endpoint=ep)
    engine = PooledEngine(None, endpoints)
    try:
        engine.inner = WorkerEngine(plan, Path(path), name=name, **kwargs)
    except EngineCrashed as exc:
        raise engine.explain(exc) from exc
    return engine
