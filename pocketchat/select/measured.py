"""Measured speeds feed the ranking: what `pocketchat bench` saw on this machine.

A bench run records, per model, the generation speed it measured next to the speed the
estimate gave for the same plan, with what kind of model it was (architecture, bytes of
weights a token reads). The ranking then
- uses the median of that build's own runs (labelled measured), and
- scales the estimates of other builds by the median ratio measured/estimated of *like*
  models only: the same architecture, a token reading within `LIKE_FACTOR` as many bytes, the
  same kind of placement. A 135M dense starter says nothing about a 35B MoE, and one noisy
  run among several moves a median little.
Pure data and functions; `load`/`save`/`forget` keep the records as JSON under the cache
directory (`pocketchat bench --forget` clears them).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from typing import TYPE_CHECKING

from pocketchat.types import Build, HardwareProfile

if TYPE_CHECKING:
    from pocketchat.select.speed import SpeedEstimate

FILE_NAME = "bench-speeds.json"
RUNS_KEPT = 5  # runs kept per model, placement and machine: the figure is their median
LIKE_FACTOR = 3.0  # models whose tokens read within this factor of bytes calibrate each other
POCKET_ARCH = "qwen35moe"  # the catalog's builds (GGUF and MLX alike)


def machine_key(profile: HardwareProfile) -> str:
    """What identifies this machine for speed records: CPU, RAM, GPUs."""
    gpus = ",".join(g.name for g in profile.gpus)
    return f"{profile.cpu_name}|{profile.cpu_physical_cores}|{profile.ram_total_bytes // 2**30}GiB|{gpus}"


def placement_kind(placement: str) -> str:
    return "cpu" if placement == "cpu" else "gpu"


def kind_of(build: Build) -> tuple[str, float]:
    """(architecture, bytes of weights a token reads): what makes two models alike in speed."""
    from pocketchat.select.speed import read_per_token

    arch = getattr(build.facts, "arch", "") or (POCKET_ARCH if build.facts is None else "")
    return arch, float(read_per_token(build))


@dataclass(frozen=True)
class SpeedRecord:
    """One bench run: the model, where it ran, what was measured and what had been estimated."""

    model: str  # build id, or the model's name for a file outside the catalog
    placement: str
    measured_tok_s: float
    estimated_tok_s: float
    machine: str
    n_threads: int = 0
    at: float = 0.0
    arch: str = ""  # "" in records written before the kind was kept: never calibrates others
    read_bytes: float = 0.0  # bytes of weights a token reads
    # The estimate's parts (seconds per token, `speed.SpeedEstimate`); 0: not known (then
    # the record calibrates by one factor, as records written before they were kept)
    memory_s: float = 0.0
    compute_s: float = 0.0
    overhead_s: float = 0.0
    # The prompt's speed beside it (0: not measured, or from a prompt too short to fill a batch)
    measured_pp_tok_s: float = 0.0
    estimated_pp_tok_s: float = 0.0

    @property
    def bound(self) -> str:
        """Which bound the estimate said this run hit ("" when its parts are not known)."""
        if self.memory_s <= 0 or self.compute_s <= 0:  # kernels not measured: bound unknown
            return ""
        return "compute" if self.compute_s > self.memory_s else "bandwidth"

    def correction(self) -> float:
        """measured / estimated seconds of the bound this run hit (the overhead taken as estimated)."""
        part = self.compute_s if self.bound == "compute" else self.memory_s
        return max(1.0 / self.measured_tok_s - self.overhead_s, part * 0.1) / part

    def like(self, arch: str, read_bytes: float) -> bool:
        """Whether this run may calibrate the estimate of a model of that kind."""
        if not self.arch or self.arch != arch or self.read_bytes <= 0 or read_bytes <= 0:
            return False
        ratio = self.read_bytes / read_bytes
        return 1 / LIKE_FACTOR <= ratio <= LIKE_FACTOR


@dataclass(frozen=True)
class Calibration:
    """The records of this machine; speeds for the ranking."""

    records: tuple[SpeedRecord, ...] = ()

    @classmethod
    def of(cls, records: list[SpeedRecord], machine: str) -> "Calibration":
        return cls(tuple(r for r in records if r.machine == machine and r.measured_tok_s > 0
                         and r.estimated_tok_s > 0))

    def speed(self, build: Build, placement: str, estimate: "float | SpeedEstimate") -> tuple[float, str]:
        """(tok/s, where the figure came from): the median of this build's runs, else the
        estimate corrected by like models' runs, else the estimate.

        A run whose estimate's parts are known corrects the bound it hit: a compute-bound run
        scales the compute part of this estimate, a bandwidth-bound one the memory part, and
        this estimate keeps its own shape (a build bound by the other part moves less or not
        at all). Runs without parts scale the whole estimate by their median factor."""
        figure = estimate if isinstance(estimate, (int, float)) else estimate.tok_s
        same = [r.measured_tok_s for r in self.records
                if r.model == build.id and r.placement == placement]
        if same:
            label = "measured" if len(same) == 1 else f"measured, median of {len(same)} runs"
            return statistics.median(same), label
        arch, read_bytes = kind_of(build)
        like = [r for r in self.records if placement_kind(r.placement) == placement_kind(placement)
                and r.like(arch, read_bytes)]
        if not like:
            return figure, "estimate"
        models = sorted({r.model for r in like})
        runs = f"{len(like)} run{'s' if len(like) > 1 else ''}"
        label = f"estimate, calibrated by {runs} of {', '.join(models)}"
        shaped = [r for r in like if r.bound]
        if shaped and not isinstance(estimate, (int, float)) and estimate.compute_s > 0:
            compute = [r.correction() for r in shaped if r.bound == "compute"]
            memory = [r.correction() for r in shaped if r.bound == "bandwidth"]
            k_c = statistics.median(compute) if compute else 1.0
            k_m = statistics.median(memory) if memory else 1.0
            return estimate.with_parts(estimate.memory_s * k_m, estimate.compute_s * k_c,
                                       estimate.overhead_s).tok_s, label
        factor = statistics.median(r.measured_tok_s / r.estimated_tok_s for r in like)
        return figure * factor, label


    def prompt_speed(self, build: Build, placement: str, estimate: float | None) -> tuple[float | None, str]:
        """(prompt tok/s, where it came from), as `speed` for decoding: this build's runs'
        median, else the estimate scaled by like models' runs' median measured/estimated."""
        same = [r.measured_pp_tok_s for r in self.records
                if r.model == build.id and r.placement == placement and r.measured_pp_tok_s > 0]
        if same:
            return statistics.median(same), "measured" if len(same) == 1 else f"measured, median of {len(same)} runs"
        if estimate is None:
            return None, "estimate"
        arch, read_bytes = kind_of(build)
        like = [r for r in self.records if placement_kind(r.placement) == placement_kind(placement)
                and r.like(arch, read_bytes) and r.measured_pp_tok_s > 0 and r.estimated_pp_tok_s > 0]
        if not like:
            return estimate, "estimate"
        factor = statistics.median(r.measured_pp_tok_s / r.estimated_pp_tok_s for r in like)
        runs = f"{len(like)} run{'s' if len(like) > 1 else ''}"
        return estimate * factor, f"estimate, calibrated by {runs} of {', '.join(sorted({r.model for r in like}))}"


def path_in(cache_dir: Path) -> Path:
    return cache_dir / FILE_NAME


_FIELDS = {f.name for f in fields(SpeedRecord)}


def load(cache_dir: Path) -> list[SpeedRecord]:
    """The records on disk; a missing or damaged file is no records."""
    try:
        raw = json.loads(path_in(cache_dir).read_text())
        return [SpeedRecord(**{k: v for k, v in r.items() if k in _FIELDS})
                for r in raw.get("records", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def _write(cache_dir: Path, records: list[SpeedRecord]) -> None:
    tmp = path_in(cache_dir).with_suffix(".tmp")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"records": [asdict(r) for r in records]}, indent=1))
        tmp.replace(path_in(cache_dir))
    except OSError as exc:
        if exc.filename is None:  # a write or close that failed (a full disk): say where
            raise OSError(exc.errno, exc.strerror, str(tmp)) from exc
        raise


def save(cache_dir: Path, record: SpeedRecord, *, runs: int = RUNS_KEPT, keep: int = 200) -> None:
    """Add a record, keeping the newest `runs` of the same model, placement and machine."""
    record = record if record.at else SpeedRecord(**{**asdict(record), "at": time.time()})
    key = (record.model, record.placement, record.machine)
    records = load(cache_dir)
    same = [r for r in records if (r.model, r.placement, r.machine) == key]
    drop = {id(r) for r in same[: max(len(same) + 1 - runs, 0)]}
    records = [r for r in records if id(r) not in drop] + [record]
    _write(cache_dir, records[-keep:])


def forget(cache_dir: Path, model: str | None = None) -> int:
    """Delete the records (of the models whose name contains `model`, when given); how many."""
    records = load(cache_dir)
    kept = [r for r in records if model is not None and model.lower() not in r.model.lower()]
    if len(kept) != len(records):
        _write(cache_dir, kept)
    return len(records) - len(kept)
