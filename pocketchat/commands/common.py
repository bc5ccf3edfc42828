"""Choosing the model a command runs: one path from --model / the recommendation to a file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from pocketchat.types import Build, LoadPlan, Recommendation


@dataclass(frozen=True)
class ModelChoice:
    """The model a command will load, where it is, and how to load it."""

    name: str
    path: Path
    plan: LoadPlan
    build: Build | None = None
    recommendation: Recommendation | None = None
