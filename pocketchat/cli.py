"""Command line: parse, dispatch to one command module, map known errors to one message."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from typing import Sequence

from pocketchat import __version__
from pocketchat.commands.selection import add_selection_args
from pocketchat.errors import DownloadDeclined, PocketchatError

# Subcommand name -> module in pocketchat.commands (imported only when used).
SUBCOMMANDS: dict[str, str] = {
    "download": "download",
    "models": "models",
    "bench": "bench",
    "history": "history",
    "rpc-server": "rpc_server",
    "serve": "serve",
    "inspect": "inspect",
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


def main(argv: Sequence[str] | None = None) -> int:
    from pocketchat.paths import settings

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
    except Exception as exc:  # the last line of defence: never a bare traceback
        if settings().debug:
            traceback.print_exc()
        from pocketchat.textsafe import one_line

        print(
            f"error: unexpected {type(exc).__name__}: {one_line(str(exc))}\n"
            "  This is a bug in pocketchat. Run again with POCKETCHAT_DEBUG=1 for the traceback"
            " and report it with `pocketchat --probe --json`.",
            file=sys.stderr,
        )
        return 1
