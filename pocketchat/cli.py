"""Command line: parse, dispatch to one command module, map known errors to one message."""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
import traceback
from pathlib import Path
from typing import Sequence

from pocketchat import __version__
from pocketchat.choose.selection import add_selection_args
from pocketchat.errors import DiskFull, DownloadDeclined, NotWritable, PocketchatError

# Subcommand name -> module in pocketchat.commands (imported only when used).
SUBCOMMANDS: dict[str, str] = {
    "download": "download",
    "models": "models",
    "bench": "bench",
    "history": "history",
    "rpc-server": "rpc_server",
    "serve": "serve",
    "web": "web",
    "inspect": "inspect",
    "tools": "tools",
}


class Parser(argparse.ArgumentParser):
    """argparse with pocketchat's one error style: `error: ...` and a hint, exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        from pocketchat.textsafe import visible

        self.print_usage(sys.stderr)
        self.exit(2, visible(f"error: {message}\n  See `{self.prog} --help`.\n"))


def _root_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="pocketchat",
        description="Chat with the POCKET build that fits this machine.",
        epilog="commands: " + ", ".join(SUBCOMMANDS) + " (pocketchat COMMAND --help)",
    )
    p.add_argument("--version", action="version", version=f"pocketchat {__version__}")
    p.add_argument("--probe", action="store_true", help="show what this machine has")
    p.add_argument("--recommend", action="store_true", help="show which build fits and why")
    p.add_argument("--json", action="store_true", help="with --probe or --recommend: print JSON")
    add_selection_args(p)
    _load("chat").configure(p)
    return p


def _load(name: str):
    return importlib.import_module(f"pocketchat.commands.{name}")


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        module = _load(SUBCOMMANDS[argv[0]])
        p = Parser(prog=f"pocketchat {argv[0]}")
        module.configure(p)
        return module.run(p.parse_args(argv[1:]))
    args = _root_parser().parse_args(argv)
    if args.probe or args.recommend:
        return _load("recommend").run(args)
    return _load("chat").run(args)


def format_error(exc: PocketchatError) -> str:
    """`error: MESSAGE` and an indented hint; text quoted from files or servers shown harmlessly."""
    from pocketchat.textsafe import visible

    text = f"error: {visible(exc.message)}"
    if exc.hint:
        text += f"\n  {visible(exc.hint)}"
    return text


READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}
NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _refusing_folder(filename: str) -> Path:
    """The folder a write was refused in: a folder that exists, else the nearest existing
    one above it (creating ~/.cache in a read-only home: the home)."""
    path = Path(filename)
    folder = path if path.is_dir() else path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _variable_for(path: Path) -> tuple[str, str] | None:
    """(what pocketchat keeps there, the variable that moves it) for a path in or above one
    of its folders."""
    from pocketchat.paths import settings

    s = settings()
    for folder, what, var in ((s.data_dir, "conversations", "POCKETCHAT_DATA_DIR"),
                              (s.cache_dir, "caches and measurements", "POCKETCHAT_CACHE_DIR"),
                              (s.hf_cache_dir, "models", "HF_HUB_CACHE")):
        if path == folder or path in folder.parents or folder in path.parents:
            return what, var
    return None


def environment_error(exc: OSError) -> PocketchatError | None:
    """A write the file system refused (read-only, not permitted, disk full) as one message that
    names the folder and what to do; None for any other OSError."""
    if exc.errno not in READ_ONLY | NO_SPACE:
        return None
    if not exc.filename:  # a write that failed without saying where
        if exc.errno not in NO_SPACE:
            return None
        from pocketchat.paths import settings

        s = settings()
        return DiskFull(f"a disk is full: {exc.strerror or exc}",
                        hint=f"Free some space on the disk of {s.data_dir}, {s.cache_dir} or "
                             f"{s.hf_cache_dir} (where pocketchat writes).")
    folder = _refusing_folder(str(exc.filename))
    owner = _variable_for(Path(str(exc.filename)))
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE:
        hint = f"Free some space on the disk of {folder}"
        if owner:
            hint += f", or set {owner[1]} to a folder on another disk (pocketchat keeps its {owner[0]} there)"
        return DiskFull(f"cannot write to {folder}: {reason}{_free_text(folder)}", hint=hint + ".")
    hint = f"Make {folder} writable"
    if owner:
        hint += f", or set {owner[1]} to a folder you can write to (pocketchat keeps its {owner[0]} there)"
    return NotWritable(f"cannot write to the folder {folder}: {reason}", hint=hint + ".")


def _free_text(folder: Path) -> str:
    """" (N free)" for the disk of `folder` (decimal units, as disks are sold), or "" when it
    cannot be read."""
    import shutil

    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    for unit, size in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if free >= size:
            return f" ({free / size:.1f} {unit} free)"
    return f" ({free} bytes free)"


def tolerate_unencodable_output() -> None:
    """A terminal or file whose encoding lacks a character (a Latin-1 locale, a Windows code
    page) gets '?' for it instead of an error that loses the rest of the answer."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # a detached or closed stream
                pass


def main(argv: Sequence[str] | None = None) -> int:
    from pocketchat.paths import settings

    tolerate_unencodable_output()
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except DownloadDeclined as exc:  # the user's own choice: a plain note, not an error
        from pocketchat.textsafe import visible

        print(visible(exc.message + (f"\n  {exc.hint}" if exc.hint else "")), file=sys.stderr)
        return 0
    except PocketchatError as exc:
        if settings().debug:
            traceback.print_exc()
        print(format_error(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:  # the environment, not a bug: a read-only or full disk
        known = environment_error(exc)
        if known is None:
            return _unexpected(exc)
        if settings().debug:
            traceback.print_exc()
        print(format_error(known), file=sys.stderr)
        return 1
    except Exception as exc:  # the last line of defence: never a bare traceback
        return _unexpected(exc)


def _unexpected(exc: Exception) -> int:
    from pocketchat.paths import settings
    from pocketchat.textsafe import one_line

    if settings().debug:
        traceback.print_exception(exc)
    print(
        f"error: unexpected {type(exc).__name__}: {one_line(str(exc))}\n"
        "  This is a bug in pocketchat. Run again with POCKETCHAT_DEBUG=1 for the traceback"
        " and report it with `pocketchat --probe --json`.",
        file=sys.stderr,
    )
    return 1
