"""A quick measured memory-bandwidth figure, cached per machine."""

from __future__ import annotations

import json
import os
import time

from pocketchat.types import MiB

BUFFER_BYTES = 128 * MiB
ROUNDS = 4


def measure_gbps(buffer_bytes: int = BUFFER_BYTES, rounds: int = ROUNDS) -> float:
    """Best of a few large array copies, in GB/s (bytes read + bytes written)."""
    import numpy as np

    src = np.ones(buffer_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages before timing
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * buffer_bytes / best / 1e9


def cached_bandwidth(cpu_name: str, ram_total: int, notes: list[str]) -> float | None:
    """The measured figure for this machine, measuring once and caching it on disk."""
    from pocketchat.paths import settings

    path = settings().bandwidth_cache
    key = f"{cpu_name}|{ram_total}"
    try:
        data = json.loads(path.read_text())
        if data.get("key") == key and float(data["gbps"]) > 0:
            return float(data["gbps"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        gbps = round(measure_gbps(), 1)
    except Exception as exc:  # numpy missing or out of memory: estimate without it
        notes.append(f"memory bandwidth not measured ({exc}); speed estimates use a default")
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "gbps": gbps, "measured_at": time.time()}))
        os.replace(tmp, path)
    except OSError:
        pass
    return gbps
