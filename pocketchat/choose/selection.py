"""What the user asked for when a command picks and loads a model: parsed and checked once.

Every command that chooses a model (the chat, `bench`, `download`, `--recommend`) gets its
flags from `add_selection_args` and turns them into one `Selection` with `Selection.from_args`,
which validates them in one place (`select.fit.check_request`), so a bad `--lang`, `--ctx` or
`--threads` gives the same message whichever command was run.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pocketchat.errors import UsageError
from pocketchat.store.spec import STARTER
from pocketchat.types import Backend, HardwareProfile, LoadPlan

if TYPE_CHECKING:
    from pocketchat.select.measured import Calibration

__all__ = ["STARTER", "Selection", "add_selection_args"]


@dataclass(frozen=True)
class Selection:
    """The model a command should run and the settings the user fixed; None = let the plan decide."""

    model: str | None = None
    backend: Backend | None = None
    lang: str = "en"
    ctx: int | None = None
    threads: int | None = None
    hardware: Path | None = None
    offline: bool = False
    yes: bool = False
    rpc: tuple[str, ...] = ()  # helpers (HOST:PORT) to pool with over llama.cpp's RPC backend
    draft: str | None = None  # --draft auto|off|ngram|mtp (None: the default); the plan may turn it off
    prompt_cache_disk_mb: int | None = None  # the prompt cache's disk tier (0: off)

    @property
    def drafts(self) -> str:
        """The drafts asked for: `--draft`, else `types.DEFAULT_DRAFT`."""
        from pocketchat.types import DEFAULT_DRAFT

        return self.draft or DEFAULT_DRAFT

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Selection":
        """The selection flags of a parsed command line, validated."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in vars(args).items() if k in names and v is not None}
        if "hardware" in values:
            values["hardware"] = Path(values["hardware"])
        if "rpc" in values:
            from pocketchat.rpc.endpoints import parse_endpoints

            values["rpc"] = parse_endpoints(values["rpc"])
        return cls(**values).checked()

    def checked(self) -> "Selection":
        """This selection, or UsageError naming the flag that cannot be used."""
        from pocketchat.select.fit import check_request

        check_request(lang=self.lang, n_ctx=self.ctx, threads=self.threads)
        if self.prompt_cache_disk_mb is not None and self.prompt_cache_disk_mb < 0:
            raise UsageError(f"--prompt-cache-disk-mb must be 0 or more, got "
                             f"{self.prompt_cache_disk_mb}",
                             hint="Give the megabytes of disk for prompt states; 0 turns it off.")
        if self.backend not in (None, "llama.cpp", "mlx"):
            raise UsageError(f"unknown --backend {self.backend!r}", hint="Use --backend llama.cpp or mlx.")
        return self

    def applied(self, plan: LoadPlan) -> LoadPlan:
        """`plan` with what the user fixed beyond the planner's choice: `--threads N` pins
        the count (the engine does not adapt it to a busy machine); `--prompt-cache-disk-mb`
        sets the disk tier's budget."""
        if self.threads is not None and not plan.threads_pinned:
            plan = replace(plan, threads_pinned=True)
        if self.prompt_cache_disk_mb is not None:
            plan = replace(plan, prompt_cache_disk_bytes=self.prompt_cache_disk_mb * 1024**2)
        return plan

    def with_model(self, model: str) -> "Selection":
        return replace(self, model=model)

    def profile(self, *, kernels: bool = False) -> HardwareProfile:
        """The replayed machine (--hardware FILE) or a fresh probe of this one. `kernels`: the
        choice needs speed estimates, so the kernel probe runs when this machine and llama.cpp
        build have no cached measurement (a few seconds, once; a line on a terminal's stderr)."""
        if self.hardware is not None:
            from pocketchat.select.profile import load_profile

            return load_profile(self.hardware)
        from pocketchat.select.probe import detect

        line = _ProbeLine()
        try:
            return detect(measure_kernels=kernels, progress=line.show)
        finally:
            line.clear()

    def calibration(self, profile: HardwareProfile) -> Calibration | None:
        """What `pocketchat bench` measured on this machine, to correct the estimates; None on
        a replayed machine (--hardware FILE), whose speeds are estimates only."""
        if self.hardware is not None:
            return None
        from pocketchat.paths import settings
        from pocketchat.select import measured

        return measured.Calibration.of(measured.load(settings().cache_dir), measured.machine_key(profile))


class _ProbeLine:
    """The kernel probe's progress: one line on stderr, rewritten, wiped at the end; only on a
    terminal (a pipe or a file gets nothing)."""

    def __init__(self) -> None:
        import sys

        self.stream = sys.stderr
        try:
            self.tty = bool(self.stream.isatty())
        except (ValueError, OSError, AttributeError):
            self.tty = False
        self.width = 0

    def show(self, done: int, total: int, what: str) -> None:
        if not self.tty:
            return
        text = f"Measuring this machine's kernels (once): {done}/{total} {what}"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


DISK_HELP = ("disk for the model states of long prompts (an agent's system prompt and tools, "
             "recent conversations), so they are read once per machine, not once per start: "
             "each state is written once, for POCKET ~63 MB plus ~20 KB per prompt token (a "
             "12,000-token agent prompt: ~300 MB), under the cache folder; 0: off, nothing is "
             "written (serve's --prompt-cache-mb 0 turns both off) (default: 5%% of the free disk, at most 8 GB, none under 8 GB free; "
             "shown by /health)")


def add_prompt_cache_disk_arg(p: argparse.ArgumentParser) -> None:
    """`--prompt-cache-disk-mb` (the chat and `serve`)."""
    p.add_argument("--prompt-cache-disk-mb", type=int, default=None, metavar="N", help=DISK_HELP)


def add_selection_args(p: argparse.ArgumentParser, *, model: bool = True) -> None:
    """The flags of every command that picks a build (`model=False`: the command names it itself)."""
    p.add_argument("--hardware", metavar="FILE", help="replay a hardware profile (JSON) instead of probing")
    p.add_argument("--lang", help="language you will chat in: en or ko (default en)")
    p.add_argument("--ctx", type=int, metavar="N", help="context size in tokens (default 8192 when it fits)")
    p.add_argument("--threads", "-t", type=int, metavar="N",
                   help="CPU threads, fixed (default: the physical cores, at most 32, fewer "
                        "while other programs keep the cores busy)")
    p.add_argument("--backend", choices=["llama.cpp", "mlx"], help="force a backend")
    p.add_argument("--draft", choices=["auto", "off", "ngram", "mtp"],
                   help="drafted tokens verified in one step (llama.cpp): auto drafts while "
                        "it measures faster here (with the model's MTP head where the GGUF "
                        "carries one, else from the conversation), ngram and mtp always, off "
                        "never (default auto); a verified batch sums in another order than one "
                        "token, so a greedy answer may take the other of two near-tied tokens; "
                        "on a hybrid model "
                        "such as POCKET it keeps 4 copies of the recurrent state (~250 MB), the "
                        "first memory given up when short")
    if model:
        p.add_argument("--model", metavar="X",
                       help="a build id, REPO:QUANT, REPO/FILE, a local .gguf or 'starter'")
    p.add_argument("--offline", action="store_true", help="never touch the network")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before downloading")
    p.add_argument("--rpc", metavar="HOST:PORT[,..]",
                   help="pool this machine with helpers running `pocketchat rpc-server`")
