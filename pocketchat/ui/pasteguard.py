"""Pasted text that holds ESC: kept in order, the ESC shown as "␛", never typed as keys.

Textual's input parser ends a bracketed paste's text at an ESC inside it and types what follows
as keys (ESC as "^"), before the paste itself arrives: `abc \\x1b[2J def` became `^[2J defabc `.
`PasteGuard` sits between the terminal and the parser and replaces each ESC inside a bracketed
paste (between `ESC[200~` and `ESC[201~`) by "␛", so the parser sees one clean paste;
`SafePasteDriver` is Textual's Linux/macOS driver with the guard in its input thread.

Its input thread also sleeps until the terminal sends something (or the app stops reading),
where Textual's wakes ten times a second to look: each wake-up takes a core from the model
for a moment (about 0.1 ms here), and an idle chat should not wake at all. It wakes early only
when the parser waits to tell a lone Esc from the start of a key's escape sequence.
"""

from __future__ import annotations

import codecs
import os
import selectors
import threading
from typing import Any, Type

from textual.driver import Driver

from pocketchat.engines.answer.partial import partial_suffix

ESC = "\x1b"
START = "\x1b[200~"
END = "\x1b[201~"
SHOWN_ESC = "\u241b"  # ␛
POLL = 0.1  # Textual's wait, used when the parser's pending timeout cannot be read


class PasteGuard:
    """A filter over the terminal's input text, fed in pieces as they are read."""

    def __init__(self) -> None:
        self.in_paste = False
        self._tail = ""  # the last few characters outside a paste (a START split across reads)
        self._held = ""  # a possible start of END at the end of the last piece, inside a paste

    def filter(self, data: str) -> str:
        """The same text, ESC inside a paste shown as ␛; may hold back up to 5 characters of one."""
        out: list[str] = []
        while data:
            if not self.in_paste:
                probe = self._tail + data
                found = probe.find(START)
                if found < 0:
                    out.append(data)
                    self._tail = probe[-(len(START) - 1):]
                    break
                cut = found + len(START) - len(self._tail)
                out.append(data[:cut])
                data, self.in_paste, self._tail = data[cut:], True, ""
                continue
            data, self._held = self._held + data, ""
            end = data.find(END)
            if end < 0:
                keep = partial_suffix(data, (END,))
                body = data[: len(data) - keep]
                self._held = data[len(body):]
                out.append(body.replace(ESC, SHOWN_ESC))
                break
            out.append(data[:end].replace(ESC, SHOWN_ESC) + END)
            data, self.in_paste = data[end + len(END):], False
        return "".join(out)


class WakingEvent(threading.Event):
    """The driver's exit event: setting it also wakes the input thread out of its wait."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._wake_fd: int | None = None

    def attach(self, fd: int | None) -> None:
        """Write a byte to `fd` on each set() from now on (None: stop; the fd may then close)."""
        with self._lock:
            self._wake_fd = fd

    def set(self) -> None:
        super().set()
        with self._lock:
            if self._wake_fd is not None:
                try:
                    os.write(self._wake_fd, b"\0")
                except OSError:  # a full pipe already wakes the reader
                    pass


def input_timeout(parser: Any) -> float | None:
    """How long the input thread may wait: until the parser's pending timeout (a lone Esc is
    told from a key's escape sequence by time), else until input or exit (None); POLL when
    this Textual does not say."""
    try:
        from textual._time import get_time

        due = parser._timeout_time
    except (ImportError, AttributeError):
        return POLL
    return None if due is None else max(0.0, due - get_time())


def safe_paste_driver(base: Type[Driver]) -> Type[Driver]:
    """`base` with the paste guard in its input thread, when it is Textual's Linux driver."""
    try:
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:  # pragma: no cover - Windows
        return base
    if not issubclass(base, LinuxDriver):
        return base

    class SafePasteDriver(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.exit_event = WakingEvent()

        def run_input_thread(self) -> None:
            guard = PasteGuard()
            parser = XTermParser(self._debug)
            decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
            selector = selectors.SelectSelector()  # as Textual: kqueue cannot watch a tty on macOS
            selector.register(self.fileno, selectors.EVENT_READ)
            wake_read, wake_write = os.pipe()
            selector.register(wake_read, selectors.EVENT_READ)
            exit_event: WakingEvent = self.exit_event
            exit_event.attach(wake_write)

            def pump(final: bool) -> bool:
                """Read what the terminal sent; False once it is gone (closed: end of input)."""
                for key, mask in selector.select(input_timeout(parser)):
                    if key.fd == wake_read:  # the app stops reading: the loop sees exit_event
                        os.read(wake_read, 64)
                    elif mask & selectors.EVENT_READ:
                        try:
                            data = os.read(self.fileno, 4096)
                        except OSError:
                            return False
                        if not data:
                            return False
                        text = decode(data, final=final)
                        if text:
                            for event in parser.feed(guard.filter(text)):
                                self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
                return True

            try:
                # A closed terminal reads as ready with nothing in it: stop reading (the
                # hang-up signal ends the app) instead of spinning a core until then.
                while not exit_event.is_set() and pump(final=False):
                    pass
                selector.unregister(self.fileno)
            finally:
                exit_event.attach(None)
                selector.close()
                os.close(wake_read)
                os.close(wake_write)
                try:
                    for _event in parser.feed(""):
                        pass
                except Exception:  # noqa: BLE001 - the parser's end of input; nothing to do
                    pass

    SafePasteDriver.__name__ = f"SafePaste{base.__name__}"
    return SafePasteDriver
