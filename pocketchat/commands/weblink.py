"""Where to open the web chat, said once the server is ready: its address on this machine, and
for a server other machines reach (`--host 0.0.0.0`) the address a phone on the same network
opens, with a QR code of it (plain block characters: no terminal escape codes).

Finding this machine's address on the network sends nothing: a UDP socket is pointed at an
address outside it and asked which local address it would use.
"""

from __future__ import annotations

import io
import ipaddress
import socket
import threading
import webbrowser
from typing import Callable


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def network_address() -> str | None:
    """This machine's address on its network (None when it has none but loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))  # no packet is sent for a UDP connect
            found = probe.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(found).is_loopback else found


def page_url(host: str, port: int, *, lan: Callable[[], str | None] = network_address) -> str:
    """The web chat's address for someone else to open: the network address for a wildcard
    host (0.0.0.0, ::), else the host as given."""
    if host in ("0.0.0.0", "::", ""):
        host = lan() or "127.0.0.1"
    return f"http://{_bracket(host)}:{port}/"


def qr_text(url: str) -> str:
    """`url` as a QR code drawn with half blocks, ready to print."""
    import segno

    out = io.StringIO()
    segno.make(url, error="m").terminal(out=out, compact=True)
    return out.getvalue()


def announce(host: str, port: int, loopback: bool, write: Callable[[str], None],
             open_browser: bool = False) -> str:
    """Say where the web chat is (and open it in the browser when asked); its address."""
    if loopback:
        url = f"http://{_bracket(host)}:{port}/"
        write(f"web chat: {url}")
    else:
        url = page_url(host, port)
        write(f"web chat: {url} (from a phone or another computer on this network: sign in "
              "with the API key)")
        write(qr_text(url).rstrip("\n"))
    if open_browser:  # its own thread: a browser that takes long to start blocks nothing
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    return url
