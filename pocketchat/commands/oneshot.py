"""One question, one answer on stdout: `pocketchat -p "question"` or `echo "question" | pocketchat`,
with files: `pocketchat -p "question" --file report.pdf`, `cat notes.md | pocketchat -p "summarise"`.

Used when a prompt is given with -p, or when stdin or stdout is not a terminal (a pipe, a file):
the chat's full-screen app would write screen codes into the file and wait for keys that never
come. The model is chosen and opened through the Python API (api.py), exactly as for the
chat (--model, or the recommendation); download progress and notes go to stderr, the answer
streams to stdout, thinking is dropped unless --show-thinking sends it to stderr. When stderr is
a terminal, one line on it (`statusline.StatusLine`) shows the model loading and the prompt
being read (done/total, rate, time left) and is wiped when the answer begins. Nothing is saved to the conversation history.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Iterator, TextIO

from pocketchat.choose.selection import Selection
from pocketchat.commands.statusline import StatusLine
from pocketchat.errors import UsageError
from pocketchat.textsafe import visible

if TYPE_CHECKING:
    from pocketchat.documents import Attachment
    from pocketchat.engines.types import Chunk

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


def read_prompt(args: argparse.Namespace, stdin: TextIO | None = None
                ) -> tuple[str, tuple[Attachment, ...]]:
    """(the question, its attachments): -p TEXT, a piped stdin (a document with -p, else the
    question) and --file (`prompt_input.asked`); UsageError when nothing is asked,
    DocumentRefused for a file that cannot be attached."""
    from pocketchat.commands import prompt_input
    from pocketchat.errors import DocumentRefused

    check_source(args, stdin)
    try:
        text, files = prompt_input.asked(args.prompt, stdin or sys.stdin,
                                         getattr(args, "files", None) or ())
    except DocumentRefused:
        raise
    except (OSError, ValueError):  # stdin closed or unreadable
        text, files = "", ()
    if not text.strip() and not files:
        raise UsageError("no question: the prompt is empty", hint=NO_TERMINAL_HINT)
    return text.strip(), files


def run(args: argparse.Namespace, sel: Selection) -> int:
    """Answer one question on stdout and exit."""
    from pocketchat import api
    from pocketchat.commands.download import choose_on_terminal

    check_source(args)  # before the model is chosen: a missing question is said at once
    choice = choose_on_terminal(sel)
    question, files = read_prompt(args)  # a file it cannot read is said before the model loads
    thinking = api_thinking(args, choice, sel)
    for note in choice.plan.notes:
        print(visible(f"note: {note}"), file=sys.stderr)
    status = StatusLine()
    try:
        session = api.open_session(choice, on_progress=status.load)
    finally:
        status.clear()
    with session:
        for note in session.info.notes:
            print(visible(f"note: {note}"), file=sys.stderr)
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": question}]
        try:
            return _stream(session.chat(messages, stream=True, thinking=thinking, files=files),
                           show_thinking=args.show_thinking, status=status)
        except KeyboardInterrupt:
            session.cancel()
            raise


def api_thinking(args: argparse.Namespace, choice, sel: Selection) -> bool | int:
    """--think as the Python API's `thinking=`: False, a budget, or True (no budget)."""
    from pocketchat.commands.think import resolve, think_of

    on, budget = resolve(think_of(args), choice, sel)
    return budget if on and budget is not None else on


def _stream(chunks: Iterator[Chunk], *, show_thinking: bool, status: StatusLine | None = None
            ) -> int:
    """Write the answer to stdout (thinking to stderr when asked), the prompt's progress on
    `status` until the answer begins; a failure raises."""
    out = sys.stdout
    status = status or StatusLine()
    ends_with_newline = True
    thinking_open = False
    try:
        for chunk in chunks:
            if chunk.progress is not None:
                status.prompt(chunk.progress)
                continue
            status.clear()
            ends_with_newline, thinking_open = _write(chunk, show_thinking, ends_with_newline,
                                                      thinking_open)
            if chunk.finish_reason is not None and chunk.stats and chunk.stats.retrieval:
                _sources(chunk.stats, ends_with_newline)
                ends_with_newline = True
    finally:
        status.clear()
    if not ends_with_newline:
        out.write("\n")
    out.flush()
    return 0


def _sources(stats, ends_with_newline: bool) -> None:
    """Retrieval was used: say so, and the passages' places, on stderr (stdout is the answer)."""
    if not ends_with_newline:
        sys.stdout.write("\n")
        sys.stdout.flush()
    print(visible(f"note: {stats.retrieval}"), file=sys.stderr)
    print(visible("sources: " + "; ".join(stats.sources)), file=sys.stderr)


def _write(chunk: Chunk, show_thinking: bool, ends_with_newline: bool, thinking_open: bool
           ) -> tuple[bool, bool]:
    """One chunk out: thinking to stderr (when asked), text to stdout; the new line state."""
    out, err = sys.stdout, sys.stderr
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
    return ends_with_newline, thinking_open
