"""The client side, in the worker: the helpers' ggml devices for `llama_model_params.devices`,
and keepalive on the connections to them.

- `rpc_devices(endpoints)`: `ggml_backend_rpc_add_server` through the registry's proc address;
  the devices go into `llama_model_params.devices` (engines/llamacpp/load.py).
- `tune_helper_sockets(endpoints)`: keepalive and TCP_USER_TIMEOUT on the worker's connections
  to the helpers, so a dropped network ends a blocked read within seconds (ggml-rpc then aborts
  the worker process, which the parent reports).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from typing import Any, Sequence

from pocketchat.errors import HelperUnreachable
from pocketchat.rpc.endpoints import split_endpoint
from pocketchat.rpc.ggml import binding, require_rpc, rpc_function
from pocketchat.rpc.wire import probe_helper, reachable
from pocketchat.types import Helper

KEEPALIVE_IDLE_S = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 4000


def probe_helpers(endpoints: Sequence[str], *, timeout: float = 3.0) -> tuple[Helper, ...]:
    """Each helper's memory and link (RpcUnavailable first when this llama.cpp has no RPC)."""
    require_rpc()
    return tuple(probe_helper(ep, timeout=timeout) for ep in endpoints)


def rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The ggml devices of every helper (each checked first: llama.cpp aborts on a dead one)."""
    add_server = rpc_function("ggml_backend_rpc_add_server", ctypes.c_void_p, ctypes.c_char_p)
    # ggml-rpc aborts the process when a helper goes away; by default ggml's abort first attaches
    # gdb for a backtrace, which takes seconds (measured ~6 s here). The parent explains the
    # abort instead, at once.
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    devices: list[int] = []
    for ep in endpoints:
        why = reachable(ep, timeout=3.0)
        if why:
            raise HelperUnreachable(why, endpoint=ep)
        reg = add_server(ep.encode())
        if not reg:
            raise HelperUnreachable(f"the helper at {ep} offers no device", endpoint=ep)
        devices.extend(binding().backend_devices(reg))
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
