"""A quick measured memory-bandwidth figure, cached per machine."""

from __future__ import annotations

import json
import os
import time

from pocketchat.types import MiB

BUFFER_BYTES = 128 * MiB
MIN_PART_BYTES = 32 * MiB  # each thread's part: well past any cache
ROUNDS = 12  # best of: a copy by several threads needs the other cores quiet for a moment
MAX_THREADS = 8
BUSY_SHARE = 0.5  # other programs using this much of a core make a copy slower than the machine


def copy_threads(physical_cores: int) -> int:
    """Threads the probe copies with: the cores decoding will use, at most MAX_THREADS."""
    return max(1, min(physical_cores, MAX_THREADS))


def measure_gbps(buffer_bytes: int = BUFFER_BYTES, rounds: int = ROUNDS, threads: int = 1
                 ) -> float:
    """Best of a few large array copies, in GB/s (bytes read + bytes written), by `threads`
    threads at once, each its own part (numpy copies without the GIL): what the cores reach
    together, as llama.cpp's threads read weights together (one core alone reaches less:
    on the 2-core dev machine 22 GB/s against 31 for two)."""
    import threading

    import numpy as np

    part = max(buffer_bytes // threads, MIN_PART_BYTES) // 8
    srcs = [np.ones(part, dtype=np.float64) for _ in range(threads)]
    dsts = [np.empty_like(src) for src in srcs]
    for src, dst in zip(srcs, dsts, strict=False):
        np.copyto(dst, src)  # touch the pages before timing
    best = float("inf")
    for _ in range(rounds):
        if threads == 1:
            t0 = time.perf_counter()
            np.copyto(dsts[0], srcs[0])
        else:
            start = threading.Barrier(threads + 1)

            def copy(i: int) -> None:
                start.wait()  # noqa: B023 - joined before the next round
                np.copyto(dsts[i], srcs[i])

            workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            start.wait()
            t0 = time.perf_counter()
            for w in workers:
                w.join()
        best = min(best, time.perf_counter() - t0)
    return 2 * part * 8 * threads / best / 1e9


def cached_bandwidth(cpu_name: str, ram_total: int, notes: list[str], physical_cores: int = 1,
                     *, busy: float | None = None) -> float | None:
    """The measured figure for this machine, measuring once and caching it on disk; not
    cached when other programs kept a core busy (`busy`, cores' worth): measured again next time."""
    from pocketchat.paths import settings

    path = settings().bandwidth_cache
    threads = copy_threads(physical_cores)
    # "quiet": measured with nobody else on the cores (figures cached before that check may be
    # a busy moment's, a fraction of the real one: they are measured again once)
    key = f"{cpu_name}|{ram_total}|copy x{threads}|quiet"
    try:
        data = json.loads(path.read_text())
        if data.get("key") == key and float(data["gbps"]) > 0:
            return float(data["gbps"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        gbps = round(measure_gbps(threads=threads), 1)
    except Exception as exc:  # numpy missing or out of memory: estimate without it
        notes.append(f"memory bandwidth not measured ({exc}); speed estimates use a default")
        return None
    if busy is not None and busy >= BUSY_SHARE:
        return gbps
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "gbps": gbps, "measured_at": time.time()}))
        os.replace(tmp, path)
    except OSError:
        pass
    return gbps
