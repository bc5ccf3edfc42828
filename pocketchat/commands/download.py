"""`pocketchat download [MODEL]`: fetch a build (default: the recommended one), resumable, verified."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from pocketchat.commands.selection import Selection, add_selection_args
from pocketchat.errors import UsageError
from pocketchat.store.types import DownloadPlan, DownloadProgress, human_bytes
from pocketchat.textsafe import one_line, visible


def configure(p: argparse.ArgumentParser) -> None:
    p.description = ("Download a model into the Hugging Face cache (resumes a kept partial file, "
                     "checks its SHA-256), then print its path.")
    p.add_argument("spec", nargs="?", metavar="MODEL",
                   help="a build id, REPO:QUANT, REPO/FILE.gguf or a repo (default: the build "
                        "recommended for this machine)")
    add_selection_args(p, model=False)
    p.add_argument("--stall-timeout", type=float, default=30.0, metavar="S",
                   help="reconnect when no data arrives for S seconds (default 30)")


def human_duration(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class TerminalProgress:
    """Progress on stderr: one line rewritten in place on a terminal, a line per 10% elsewhere;
    the checks before a download (phase "checking") as a line per step."""

    _open_line: "TerminalProgress | None" = None  # whose line the cursor is at the end of

    def __init__(self, stream: TextIO | None = None, *, interval_s: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self._last = 0.0
        self._decile = -1
        self._width = 0
        self._open = False
        self._last_step = ""

    def __call__(self, p: DownloadProgress) -> None:
        if p.phase == "checking":  # the steps before the question: one line, rewritten
            self._step(p)
            return
        if p.message and p.phase in ("retrying", "waiting"):
            self._line(f"{p.filename}: {p.message}")
            return
        if p.phase == "verifying" and p.bytes_done == 0 and p.message:
            self._line(p.message)
            return
        now = time.monotonic()
        if self.tty:
            if now - self._last < self.interval_s and p.phase != "done":
                return
            self._last = now
            text = self.format(p)
            self.stream.write("\r" + one_line(text).ljust(self._width))
            self._width = len(text)
            self._open = True
            TerminalProgress._open_line = self
            self.stream.flush()
        else:
            decile = int(p.fraction * 10)
            if decile != self._decile:
                self._decile = decile
                self.stream.write(one_line(self.format(p)) + "\n")
                self.stream.flush()

    def _step(self, p: DownloadProgress) -> None:
        """A check before the download: on a terminal its line is rewritten as bytes arrive;
        elsewhere each step once."""
        text = f"{p.name}: {p.message}"
        if p.bytes_total:
            text += f"  {human_bytes(p.bytes_done, like=p.bytes_total)} / {human_bytes(p.bytes_total)}"
        if not self.tty:
            if p.message != self._last_step:
                self._last_step = p.message
                self.stream.write(visible(f"{p.name}: {p.message}") + "\n")
                self.stream.flush()
            return
        now = time.monotonic()
        if p.message == self._last_step and now - self._last < self.interval_s:
            return
        self._last, self._last_step = now, p.message
        text = one_line(text)
        self.stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        self._open = True
        TerminalProgress._open_line = self
        self.stream.flush()

    @staticmethod
    def format(p: DownloadProgress) -> str:
        verb = "verifying" if p.phase == "verifying" else "downloading"
        parts = [f"{verb} {p.name}"]
        if p.file_count > 1:
            parts.append(f"[{p.file_index}/{p.file_count}]")
        parts.append(f"{human_bytes(p.bytes_done, like=p.bytes_total)} / {human_bytes(p.bytes_total)}")
        parts.append(f"{100 * p.fraction:5.1f}%")
        if p.speed_bps > 0:
            parts.append(f"{p.speed_bps / 1e6:.1f} MB/s")
        if p.eta_s is not None and p.phase == "downloading":
            parts.append(f"ETA {human_duration(p.eta_s)}")
        return "  ".join(parts)

    def _line(self, text: str) -> None:
        self.finish()
        self.stream.write(visible(text) + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
            self._width = 0
        if TerminalProgress._open_line is self:
            TerminalProgress._open_line = None

    @classmethod
    def end_line(cls) -> None:
        """End the line a progress display left open (before something else writes)."""
        if cls._open_line is not None:
            cls._open_line.finish()


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


def run(args: argparse.Namespace) -> int:
    from pocketchat.commands.common import download_vet
    from pocketchat.store import api as store

    sel = Selection.from_args(args)
    spec = args.spec
    progress = TerminalProgress()
    if not spec:
        from pocketchat.commands.common import recommend
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
