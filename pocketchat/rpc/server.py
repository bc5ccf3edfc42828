"""The server side: llama.cpp's RPC server (`ggml_backend_rpc_start_server`) on this machine's
GPU, or its CPU when it has none, as llama.cpp's rpc-server does (`pocketchat rpc-server`)."""

from __future__ import annotations

import ctypes
from typing import Sequence

from pocketchat.rpc.ggml import DEVICE_CPU, DEVICE_GPU, DEVICE_IGPU, Device, binding, rpc_function

SERVER_WARNING = (
    "WARNING: Host ('{host}') is != '127.0.0.1'\n"
    "         Never expose the RPC server to an open network!\n"
    "         This is an experimental feature and is not secure!"
)


def server_devices() -> list[Device]:
    """The devices to serve: the accelerators, else the CPU."""
    devices = binding().devices()
    gpus = [d for d in devices if d.kind in (DEVICE_GPU, DEVICE_IGPU)]
    return gpus or [d for d in devices if d.kind == DEVICE_CPU][:1]


def serve(host: str, port: int, threads: int, cache_dir: str | None, devices: Sequence[Device]) -> None:
    """llama.cpp's RPC server on `devices`; blocks for ever (returns only if it cannot listen)."""
    start = rpc_function("ggml_backend_rpc_start_server", None, ctypes.c_char_p, ctypes.c_char_p,
                         ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
    arr = (ctypes.c_void_p * len(devices))(*[d.handle for d in devices])
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads,
          len(devices), arr)
