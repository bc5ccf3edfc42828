"""The memory a plan may use: this machine alone, or this machine plus helpers over a link.

A `Budget` is what `fit.judge` measures a build against. Alone, it is this machine's RAM (less
a reserve) and the GPU's free memory; pooled, it adds each helper's memory (less the same
reserve) and a `Link` model that says what a generated token costs on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pocketchat.types import GPU, GiB, HardwareProfile, Helper

GPU_RESERVE_BYTES = GiB // 2
CPU_REPORTED_AVAILABLE = 0.85  # a CPU helper reports total RAM as free; count this share


@dataclass(frozen=True)
class Link:
    """The network cost of a pooled token, per helper: round trips plus the bytes it moves.

    A helper's measured round-trip time and throughput are used when known, else these defaults.
    """

    round_trips_per_token: int = 2  # activations in, graph computed, result read back
    default_rtt_s: float = 0.5e-3
    default_throughput: float = 100e6  # bytes/s: about gigabit Ethernet

    def seconds(self, helper: Helper, *, hidden: int, vocab: int, last: bool) -> float:
        """Network time per generated token for one helper (`last` sends the logits back)."""
        rtt = helper.rtt_seconds if helper.rtt_seconds is not None else self.default_rtt_s
        rate = helper.throughput_bytes_s or self.default_throughput
        moved = hidden * 4 * 2 + (vocab * 4 if last else 0)
        return self.round_trips_per_token * rtt + moved / rate


@dataclass(frozen=True)
class Budget:
    """This machine, and the helpers lending it memory (none: the machine alone)."""

    machine: HardwareProfile
    helpers: tuple[Helper, ...] = ()
    link: Link = field(default_factory=Link)

    @classmethod
    def of(cls, where: "Budget | HardwareProfile", helpers: Sequence[Helper] = ()) -> "Budget":
        """A budget as given, or this machine's (with `helpers`, when any)."""
        return where if isinstance(where, Budget) else cls(where, tuple(helpers))

    @property
    def pooled(self) -> bool:
        return bool(self.helpers)

    def device_budgets(self) -> list[int]:
        """Bytes each device of the pool may hold: this machine's RAM first, then each helper."""
        return [cpu_budget(self.machine)] + [helper_budget(h) for h in self.helpers]


def ram_reserve(profile: HardwareProfile) -> int:
    """RAM kept free for the system and other programs: 15% of total, 1 to 4 GiB."""
    return reserve_of(profile.ram_total_bytes)


def reserve_of(total: int) -> int:
    """The reserve for a machine with `total` bytes of memory (here or a helper)."""
    return int(min(max(total * 0.15, 1 * GiB), 4 * GiB))


def cpu_budget(profile: HardwareProfile) -> int:
    """Bytes a model may use in this machine's RAM: what is available less the reserve."""
    return max(profile.ram_available_bytes - ram_reserve(profile), 0)


def main_gpu(profile: HardwareProfile) -> GPU | None:
    """The GPU a model would be offloaded to: Apple's, else the discrete one with most VRAM."""
    for g in profile.gpus:
        if g.vendor == "apple":
            return g
    discrete = [g for g in profile.gpus if not g.unified_memory and g.vram_total_bytes > 0]
    return max(discrete, key=lambda g: g.vram_free_bytes or g.vram_total_bytes, default=None)


def gpu_budget(gpu: GPU, profile: HardwareProfile) -> int:
    """Bytes a model may use on the GPU: free VRAM less a reserve; Metal budget on Apple."""
    if gpu.vendor == "apple":
        # Unified memory: the Metal working-set budget, and no more than RAM can give.
        return min(gpu.vram_total_bytes, cpu_budget(profile))
    free = gpu.vram_free_bytes or gpu.vram_total_bytes
    return max(free - GPU_RESERVE_BYTES, 0)


def helper_budget(helper: Helper) -> int:
    """Bytes a helper may hold: its free memory (85% of RAM for a CPU device) less a reserve."""
    free = helper.free_bytes
    if helper.reports_total_as_free:
        free = int(helper.total_bytes * CPU_REPORTED_AVAILABLE)
    return max(free - reserve_of(helper.total_bytes), 0)
