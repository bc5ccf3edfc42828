"""`pocketchat download [MODEL]`: fetch a build (default: the recommended one), resumable, verified."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pocketchat.choose.selection import Selection, add_selection_args
from pocketchat.errors import UsageError
from pocketchat.store.progress import TerminalProgress, human_duration  # noqa: F401 - the CLI's
from pocketchat.store.types import DownloadPlan, DownloadProgress, human_bytes
from pocketchat.textsafe import visible


def configure(p: argparse.ArgumentParser) -> None:
    p.description = ("Download a model into the Hugging Face cache (resumes a kept partial file, "
                     "checks its SHA-256), then print its path.")
    p.add_argument("spec", nargs="?", metavar="MODEL",
                   help="a build id, REPO:QUANT, REPO/FILE.gguf or a repo (default: the build "
                        "recommended for this machine)")
    add_selection_args(p, model=False)
    p.add_argument("--stall-timeout", type=float, default=30.0, metavar="S",
                   help="reconnect when no data arrives for S seconds (default 30)")


def make_confirm(yes: bool, stdin: TextIO | None = None, stream: TextIO | None = None):
    """`confirm(plan)`: True with --yes; else ask on the terminal; no terminal: UsageError."""

    def confirm(plan: DownloadPlan) -> bool:
        if yes:
            return True
        inp, out = stdin or sys.stdin, stream or sys.stderr
        if not (getattr(inp, "isatty", lambda: False)()):
            raise UsageError(f"not downloading {plan.name} ({human_bytes(plan.total_bytes)}) without asking, "
                             "and there is no terminal to ask on",
                             hint="Pass --yes to download without asking.")
        TerminalProgress.end_line()  # the question on a line of its own, after the checks'
        out.write(visible(plan.question()) + " [y/N] ")
        out.flush()
        return inp.readline().strip().lower() in ("y", "yes")

    return confirm


def choose_on_terminal(sel: Selection):
    """The model a command runs (`api.choose`), asked about and shown on the terminal as
    `pocketchat download` does: the question (none with --yes), the checks' and download's bar."""
    from pocketchat import api

    progress = TerminalProgress()
    try:
        return api.choose(sel, confirm=make_confirm(sel.yes), progress=progress)
    finally:
        progress.finish()


def run(args: argparse.Namespace) -> int:
    from pocketchat.choose.model import download_vet
    from pocketchat.store import api as store

    sel = Selection.from_args(args)
    spec = args.spec
    progress = TerminalProgress()
    if not spec:
        from pocketchat.choose.model import recommend
        from pocketchat.select.report import nothing_fits

        if sel.hardware is None:  # the probe: a second or two on a first run
            progress(DownloadProgress("the build to download", "", "checking", 0, 0,
                                      message="looking at this machine (memory, devices, speed)"))
        try:
            rec = recommend(sel)
        finally:
            progress.finish()
        if rec.recommended is None:
            raise nothing_fits(rec, hint="Name a smaller model: pocketchat download MODEL")
        spec = rec.recommended.build
        print(f"recommended for this machine: {spec.id} ({rec.recommended.reason})", file=sys.stderr)
    try:
        options = store.DownloadOptions(stall_timeout_s=max(args.stall_timeout, 0.1))
        path = store.ensure(spec, offline=sel.offline, confirm=make_confirm(sel.yes), progress=progress,
                            options=options, vet=download_vet(sel))
    finally:
        progress.finish()
    print(visible(str(path)))
    return 0
