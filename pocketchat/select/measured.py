"""Measured speeds feed the ranking: what `pocketchat bench` saw on this machine.

A bench run records, per model, the generation speed it measured next to the speed the
estimate gave for the same plan. The ranking then uses the measured figure for that build
(labelled measured) and scales the estimates of the others by how far the estimate was off on
this machine, per kind of placement (CPU runs calibrate CPU plans, GPU runs GPU plans).
Pure data and functions; `load`/`save` keep the records as JSON under the cache directory.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pocketchat.types import HardwareProfile

FILE_NAME = "bench-speeds.json"


def machine_key(profile: HardwareProfile) -> str:
    """What identifies this machine for speed records: CPU, RAM, GPUs."""
    gpus = ",".join(g.name for g in profile.gpus)
    return f"{profile.cpu_name}|{profile.cpu_physical_cores}|{profile.ram_total_bytes // 2**30}GiB|{gpus}"


def placement_kind(placement: str) -> str:
    return "cpu" if placement == "cpu" else "gpu"


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


@dataclass(frozen=True)
class Calibration:
    """The records of this machine; speeds for the ranking."""

    records: tuple[SpeedRecord, ...] = ()
    factors: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[SpeedRecord], machine: str) -> "Calibration":
        mine = tuple(r for r in records if r.machine == machine and r.measured_tok_s > 0
                     and r.estimated_tok_s > 0)
        factors: dict[str, float] = {}
        for kind in ("cpu", "gpu"):
            ratios = [r.measured_tok_s / r.estimated_tok_s for r in mine if placement_kind(r.placement) == kind]
            if ratios:  # geometric mean: one odd run does not dominate
                factors[kind] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        return cls(mine, factors)

    def speed(self, model: str, placement: str, estimate: float) -> tuple[float, str]:
        """(tok/s, label): measured for this model and placement, else the calibrated estimate."""
        same = [r for r in self.records if r.model == model and r.placement == placement]
        if same:
            return same[-1].measured_tok_s, "measured"
        factor = self.factors.get(placement_kind(placement))
        if factor is None:
            return estimate, "estimate"
        return estimate * factor, "estimate, calibrated by a measured run"


def path_in(cache_dir: Path) -> Path:
    return cache_dir / FILE_NAME


def load(cache_dir: Path) -> list[SpeedRecord]:
    """The records on disk; a missing or damaged file is no records."""
    try:
        raw = json.loads(path_in(cache_dir).read_text())
        return [SpeedRecord(**r) for r in raw.get("records", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def save(cache_dir: Path, record: SpeedRecord, *, keep: int = 50) -> None:
    """Add a record (replacing the same model, placement and machine), keeping the newest."""
    records = [r for r in load(cache_dir)
               if (r.model, r.placement, r.machine) != (record.model, record.placement, record.machine)]
    records.append(record if record.at else SpeedRecord(**{**asdict(record), "at": time.time()}))
    tmp = path_in(cache_dir).with_suffix(".tmp")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"records": [asdict(r) for r in records[-keep:]]}, indent=1))
        tmp.replace(path_in(cache_dir))
    except OSError as exc:
        if exc.filename is None:  # a write or close that failed (a full disk): say where
            raise OSError(exc.errno, exc.strerror, str(tmp)) from exc
        raise
