"""The server side: llama.cpp's RPC server (`ggml_backend_rpc_start_server`) on this machine's
GPU, or its CPU when it has none, as llama.cpp's rpc-server does (`pocketchat rpc-server`)."""

from __future__ import annotations

import ctypes
from typing import Sequence

from pocketchat.rpc.ggml import ggml

SERVER_WARNING = (
    "WARNING: Host ('{host}') is != '127.0.0.1'\n"
    "         Never expose the RPC server to an open network!\n"
    "         This is an experimental feature and is not secure!"
)


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
