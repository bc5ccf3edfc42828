"""The terminal the chat draws on: the controlling terminal, whatever stderr is.

Textual draws on stderr (`sys.__stderr__`, descriptor 2). With `pocketchat 2> err.log` the
whole screen would go into the file and the terminal stay blank; so while the chat runs,
descriptor 2 is the controlling terminal (/dev/tty) and the redirect is put back afterwards:
what is printed before and after the chat (an error, a reminder) still lands in the file.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from pocketchat.errors import UsageError


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


@contextlib.contextmanager
def drawing_on_the_terminal() -> Iterator[None]:
    """Inside the block, descriptor 2 is the terminal when stderr alone was redirected (stdout
    is a terminal); UsageError when there is no controlling terminal to draw on."""
    if sys.platform == "win32" or _is_terminal(2) or not _is_terminal(1):
        yield
        return
    try:
        tty = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        raise UsageError("the chat draws on the terminal, and this process has none (stderr is "
                         "redirected and there is no controlling terminal)",
                         hint='Run it in a terminal without 2>, or ask one question with -p "QUESTION".'
                         ) from None
    for stream in (sys.stderr, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(2)
    os.dup2(tty, 2)
    os.close(tty)
    try:
        yield
    finally:
        for stream in (sys.stderr, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved, 2)
        os.close(saved)
