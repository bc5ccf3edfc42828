"""One question, one answer on stdout: `pocketchat -p "question"` or `echo "question" | pocketchat`.

Used when a prompt is given with -p, or when stdin or stdout is not a terminal (a pipe, a file):
the chat's full-screen app would write screen codes into the file and wait for keys that never
come. The model is chosen exactly as for the chat (--model, or the recommendation); download
progress and notes go to stderr, the answer streams to stdout, thinking is dropped unless
--show-thinking sends it to stderr. Nothing is saved to the conversation history.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pocketchat.commands.selection import Selection
from pocketchat.errors import EngineError, UsageError
from pocketchat.textsafe import visible

NO_TERMINAL_HINT = ('Ask one question with -p "QUESTION" (or pipe it in: echo "QUESTION" | pocketchat); '
                    "run pocketchat in a terminal for the chat.")


def wanted(args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None) -> bool:
    """Whether this run is one-shot: a -p prompt, or stdin or stdout not a terminal."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    return args.prompt is not None or not (_tty(stdin) and _tty(stdout))


def _tty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def check_source(args: argparse.Namespace, stdin: TextIO | None = None) -> None:
    """UsageError when there is no question to read: no -p and stdin is the terminal."""
    stdin = stdin or sys.stdin
    if getattr(args, "resume", False):
        raise UsageError("--continue reopens a chat, which needs a terminal", hint=NO_TERMINAL_HINT)
    if args.prompt is None and (stdin is None or _tty(stdin)):
        raise UsageError("the chat needs a terminal, and the output is not one (no prompt was given either)",
                         hint=NO_TERMINAL_HINT)


def read_prompt(args: argparse.Namespace, stdin: TextIO | None = None) -> str:
    """The question: -p TEXT, else all of stdin (a pipe or a file); UsageError when it is empty."""
    check_source(args, stdin)
    try:
        text = args.prompt if args.prompt is not None else (stdin or sys.stdin).read()
    except (OSError, ValueError):  # stdin closed or unreadable
        text = ""
    if not text.strip():
        raise UsageError("no question: the prompt is empty", hint=NO_TERMINAL_HINT)
    return text.strip()


def run(args: argparse.Namespace, sel: Selection) -> int:
    """Answer one question on stdout and exit."""
    from pocketchat.commands.common import choose_model
    from pocketchat.commands.download import TerminalProgress, make_confirm
    from pocketchat.engines import open_engine
    from pocketchat.engines.types import ChatOptions, Message

    check_source(args)  # before the model is chosen: a missing question is said at once
    progress = TerminalProgress()
    try:
        choice = choose_model(sel, confirm=make_confirm(sel.yes), progress=progress)
    finally:
        progress.finish()
    question = read_prompt(args)
    for note in choice.plan.notes:
        print(visible(f"note: {note}"), file=sys.stderr)
    engine = open_engine(choice.plan, choice.path, name=choice.label)
    try:
        for note in engine.info.notes:
            print(visible(f"note: {note}"), file=sys.stderr)
        messages = ([Message("system", args.system)] if args.system else []) + [Message("user", question)]
        options = ChatOptions(thinking=not args.no_think)
        return _stream(engine, messages, options, show_thinking=args.show_thinking)
    except KeyboardInterrupt:
        engine.cancel()
        raise
    finally:
        engine.close()


def _stream(engine, messages, options, *, show_thinking: bool) -> int:
    out, err = sys.stdout, sys.stderr
    ends_with_newline = True
    thinking_open = False
    for chunk in engine.chat(messages, options):
        if chunk.thinking and show_thinking:
            err.write(visible(chunk.thinking))
            err.flush()
            thinking_open = True
        if chunk.text:
            if thinking_open:
                err.write("\n")
                thinking_open = False
            text = visible(chunk.text)
            out.write(text)
            out.flush()
            ends_with_newline = text.endswith("\n")
        if chunk.finish_reason == "error":
            raise chunk.failure or EngineError(f"the answer failed: {chunk.error or 'unknown error'}")
    if not ends_with_newline:
        out.write("\n")
    out.flush()
    return 0
