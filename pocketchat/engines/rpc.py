"""Pooling machines through llama.cpp's RPC backend (ggml-rpc), from Python.

llama-cpp-python does not pass `rpc_servers` on, but a build with `-DGGML_RPC=on` ships
libggml-rpc and registers the "RPC" backend; everything here reaches it through ctypes:

- `probe_helper(endpoint)`: a small client of the RPC wire protocol (v7, the vendored
  ggml-rpc.cpp): HELLO, DEVICE_COUNT, GET_DEVICE_MEMORY (the helper's memory), the round-trip
  time, and the throughput of a 4 MiB SET_TENSOR into a scratch buffer that is freed again.
  Pure Python sockets with timeouts: llama.cpp's own client aborts the process when a
  server cannot be reached, so nothing native touches a helper before this check passed.
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
import ipaddress
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from pocketchat.errors import (
    EngineCrashed,
    HelperGone,
    HelperUnreachable,
    RpcUnavailable,
    UsageError,
)
from pocketchat.types import Helper

DEFAULT_PORT = 50052
PROTO_MAJOR = 7
CONN_CAPS_SIZE = 24
PROBE_PAYLOAD = 4 * 1024 * 1024
KEEPALIVE_IDLE_S = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 4000

# rpc_cmd values (ggml-rpc.cpp; HELLO is pinned at 14 across versions).
ALLOC_BUFFER, GET_ALIGNMENT, BUFFER_GET_BASE, FREE_BUFFER = 0, 1, 3, 4
SET_TENSOR, GET_DEVICE_MEMORY, HELLO, DEVICE_COUNT = 6, 11, 14, 15
GGML_TYPE_I8 = 24
# rpc_tensor (packed): id u64, type u32, buffer u64, ne u32x4, nb u32x4, op u32,
# op_params i32x16, flags i32, src u64x10, view_src u64, view_offs u64, data u64,
# name char[64], use_count i32.
_TENSOR = struct.Struct("<QIQ4I4II16ii10QQQQ64si")
assert _TENSOR.size == 296

SERVER_WARNING = (
    "WARNING: Host ('{host}') is != '127.0.0.1'\n"
    "         Never expose the RPC server to an open network!\n"
    "         This is an experimental feature and is not secure!"
)


# -- endpoints ------------------------------------------------------------------------------


def parse_endpoints(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT]` (or a list of them) -> endpoints; UsageError on a bad one."""
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    out: list[str] = []
    for raw in items:
        item = raw.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--rpc {item!r} is not HOST:PORT",
                             hint=f"Give the helper's address and port, e.g. --rpc 192.168.1.20:{DEFAULT_PORT}.")
        if item not in out:
            out.append(f"{host.strip('[]')}:{int(port)}")
    if len(out) > 16:
        raise UsageError("--rpc takes at most 16 helpers (GGML_RPC_MAX_SERVERS)")
    return tuple(out)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


# -- the wire protocol (a client small enough to probe a helper safely) -----------------------


class RpcWire:
    """One connection to an rpc-server: request = cmd u8 | size u64 | data; reply = size u64 | data."""

    def __init__(self, endpoint: str, timeout: float = 3.0) -> None:
        self.endpoint = endpoint
        host, port = split_endpoint(endpoint)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            why = "nothing listens there" if isinstance(exc, ConnectionRefusedError) else str(exc)
            raise HelperUnreachable(f"cannot reach the helper at {endpoint}: {why}",
                                    endpoint=endpoint) from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            reply = self.call(HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE)
        except HelperUnreachable:
            self.close()
            raise
        major, minor, patch = reply[0], reply[1], reply[2]
        self.version = f"{major}.{minor}.{patch}"
        if major != PROTO_MAJOR:
            self.close()
            raise HelperUnreachable(
                f"the helper at {endpoint} speaks RPC protocol {self.version}; this llama.cpp "
                f"speaks {PROTO_MAJOR}.x", endpoint=endpoint,
                hint="Install the same pocketchat and llama-cpp-python version on both machines.")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> "RpcWire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, cmd: int, data: bytes = b"") -> None:
        try:
            self.sock.sendall(struct.pack("<BQ", cmd, len(data)) + data)
        except OSError as exc:
            raise HelperUnreachable(f"the helper at {self.endpoint} dropped the connection: {exc}",
                                    endpoint=self.endpoint) from exc

    def call(self, cmd: int, data: bytes, reply_size: int) -> bytes:
        self.send(cmd, data)
        size = struct.unpack("<Q", self._recv(8))[0]
        if size != reply_size:
            raise HelperUnreachable(f"the helper at {self.endpoint} answered {size} bytes, not "
                                    f"{reply_size}: is it llama.cpp's rpc-server?", endpoint=self.endpoint)
        return self._recv(size)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        try:
            while len(buf) < n:
                part = self.sock.recv(n - len(buf))
                if not part:
                    raise ConnectionResetError("connection closed")
                buf += part
        except (OSError, socket.timeout) as exc:
            raise HelperUnreachable(
                f"the helper at {self.endpoint} did not answer ({exc}); it serves one client at a "
                "time: is another pocketchat using it?", endpoint=self.endpoint) from exc
        return bytes(buf)

    # -- commands ----------------------------------------------------------------------------

    def device_count(self) -> int:
        return struct.unpack("<I", self.call(DEVICE_COUNT, b"", 4))[0]

    def device_memory(self, device: int = 0) -> tuple[int, int]:
        free, total = struct.unpack("<QQ", self.call(GET_DEVICE_MEMORY, struct.pack("<I", device), 16))
        return free, total

    def upload_seconds(self, size: int) -> float | None:
        """Seconds to send `size` bytes into a scratch buffer on device 0 (None: no buffer)."""
        ptr, got = struct.unpack("<QQ", self.call(ALLOC_BUFFER, struct.pack("<IQ", 0, size), 16))
        if not ptr or got < size:
            return None
        try:
            base = struct.unpack("<Q", self.call(BUFFER_GET_BASE, struct.pack("<Q", ptr), 8))[0]
            ne, nb = (size, 1, 1, 1), (1, size, size, size)
            tensor = _TENSOR.pack(1, GGML_TYPE_I8, ptr, *ne, *nb, 0, *([0] * 16), 0,
                                  *([0] * 10), 0, 0, base, b"probe", 0)
            payload = tensor + struct.pack("<BQ", 0, 0) + bytes(size)
            start = time.perf_counter()
            self.send(SET_TENSOR, payload)
            self.call(GET_ALIGNMENT, struct.pack("<I", 0), 8)  # returns once the data is in
            return time.perf_counter() - start
        finally:
            self.send(FREE_BUFFER, struct.pack("<Q", ptr))


def probe_helper(endpoint: str, *, timeout: float = 3.0, payload: int = PROBE_PAYLOAD) -> Helper:
    """Ask the helper for its memory and measure the link; HelperUnreachable when it cannot."""
    with RpcWire(endpoint, timeout) as wire:
        n = wire.device_count()
        if n == 0:
            raise HelperUnreachable(f"the helper at {endpoint} offers no device", endpoint=endpoint)
        mem = [wire.device_memory(i) for i in range(n)]
        rtts = []
        for _ in range(5):
            start = time.perf_counter()
            wire.device_memory(0)
            rtts.append(time.perf_counter() - start)
        rtt = sorted(rtts)[len(rtts) // 2]
        seconds = wire.upload_seconds(payload) if payload else None
    throughput = payload / max(seconds - rtt, 1e-6) if seconds else None
    free = sum(f for f, _ in mem)
    total = sum(t for _, t in mem)
    return Helper(endpoint=endpoint, free_bytes=free, total_bytes=total, n_devices=n,
                  rtt_seconds=rtt, throughput_bytes_s=throughput,
                  reports_total_as_free=all(f == t for f, t in mem))


def probe_helpers(endpoints: Sequence[str], *, timeout: float = 3.0) -> tuple[Helper, ...]:
    require_rpc()
    return tuple(probe_helper(ep, timeout=timeout) for ep in endpoints)


def reachable(endpoint: str, timeout: float = 1.5) -> str | None:
    """None when the helper answers HELLO, else why not."""
    try:
        RpcWire(endpoint, timeout).close()
        return None
    except HelperUnreachable as exc:
        return exc.message


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


if sys.platform == "win32":  # pragma: no cover - /proc is Linux; Windows keeps llama.cpp's defaults
    def tune_helper_sockets(endpoints: Sequence[str]) -> int:  # noqa: F811
        return 0
