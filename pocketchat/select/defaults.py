"""What a plan sets when the user did not: CPU threads and sampling. The one owner of both
(which `Sampling` each kind of model gets; POCKET's numbers are `types.Sampling`'s defaults,
where the engines, which do not import `select`, find them too)."""

from __future__ import annotations

from typing import Callable, Literal

from pocketchat.types import HardwareProfile, Sampling

MAX_THREADS = 32
OVERSUBSCRIBE = 8  # --threads runs at most this many threads per CPU thread
BUSY_SHARE = 0.5  # a core other programs use this much of is taken
SAME_SPEED = 0.02  # estimates this close are the same speed

ModelKind = Literal["pocket", "starter", "file"]
# POCKET (a Qwen3.5-style thinking model): the dataclass's own defaults.
POCKET_SAMPLING = Sampling()
# SmolLM2's model card suggests a low temperature for the small instruct models.
STARTER_SAMPLING = Sampling(temperature=0.2, top_p=0.9, top_k=40, min_p=0.05, repeat_penalty=1.1)
# Any other model: llama.cpp's usual defaults.
FILE_SAMPLING = Sampling(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repeat_penalty=1.1)
_SAMPLING = {"pocket": POCKET_SAMPLING, "starter": STARTER_SAMPLING, "file": FILE_SAMPLING}


def cpu_threads(physical: int, logical: int = 0) -> int:
    """Threads for a CPU with these core counts: the physical cores, at most 32."""
    return max(1, min(physical or logical or 1, MAX_THREADS))


def busy_cores(profile: HardwareProfile) -> int:
    """Cores other programs keep busy (`cpu_busy_cores`, what the probe saw): each counted
    once they use half of it or more, since llama.cpp's threads wait at every operation for
    the slowest one, and a thread that shares its core is slow."""
    return busy_cores_of(profile.cpu_busy_cores)


def busy_cores_of(busy: float | None) -> int:
    """`busy` cores' worth of CPU as whole cores taken (half a core or more counts as one)."""
    return int(busy + BUSY_SHARE) if busy else 0


def thread_ceiling(profile: HardwareProfile) -> int | None:
    """The most threads a plan runs however many are asked: `OVERSUBSCRIBE` per CPU thread
    (None when the machine's count is unknown). Past it every step waits on hundreds of
    threads that share two cores: a one-line answer took 48-82 s at 999 threads on a 2-core
    machine, 4 s at 2 and 4.7 s at 16."""
    have = profile.cpu_logical_cores or profile.cpu_physical_cores
    return have * OVERSUBSCRIBE if have else None


def threads(profile: HardwareProfile, requested: int | None = None) -> int:
    """The threads a plan on this machine uses: `requested` (--threads, at most
    `thread_ceiling`), else the physical cores (at most 32) less those other programs keep
    busy, at least 1."""
    if requested:
        ceiling = thread_ceiling(profile)
        return requested if ceiling is None else min(requested, ceiling)
    cores = cpu_threads(profile.cpu_physical_cores, profile.cpu_logical_cores)
    return max(cores - busy_cores(profile), 1)


def best_threads(most: int, speed: Callable[[int], float]) -> int:
    """The thread count up to `most` with the highest `speed(n)` (an estimate); a smaller count
    within `SAME_SPEED` of the best wins (the cores it leaves free cost nothing)."""
    speeds = {n: speed(n) for n in range(1, max(most, 1) + 1)}
    top = max(speeds.values())
    return min(n for n, v in speeds.items() if v >= top * (1 - SAME_SPEED))


def sampling(kind: ModelKind) -> Sampling:
    """The sampling defaults for a catalog build, the starter, or any other model file."""
    return _SAMPLING[kind]
