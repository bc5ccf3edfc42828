"""What a plan sets when the user did not: CPU threads and sampling. The one owner of both."""

from __future__ import annotations

from typing import Literal

from pocketchat.types import HardwareProfile, Sampling

MAX_THREADS = 32

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


def threads(profile: HardwareProfile, requested: int | None = None) -> int:
    """The threads a plan on this machine uses: `requested` (--threads) or the default."""
    return requested or cpu_threads(profile.cpu_physical_cores, profile.cpu_logical_cores)


def sampling(kind: ModelKind) -> Sampling:
    """The sampling defaults for a catalog build, the starter, or any other model file."""
    return _SAMPLING[kind]
