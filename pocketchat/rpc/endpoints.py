"""Helper addresses: `HOST:PORT` parsing and checks (pure)."""

from __future__ import annotations

import ipaddress
from typing import Sequence

from pocketchat.errors import UsageError

DEFAULT_PORT = 50052
MAX_HELPERS = 16  # GGML_RPC_MAX_SERVERS


def parse_endpoints(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT]` (or a list of them) -> endpoints; UsageError on a bad one."""
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    out: list[str] = []
    for raw in items:
        item = raw.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--rpc {item!r} is not HOST:PORT",
                             hint=f"Give the helper's address and port, e.g. --rpc 192.168.1.20:{DEFAULT_PORT}.")
        endpoint = f"{host.strip('[]')}:{int(port)}"
        if endpoint not in out:
            out.append(endpoint)
    if len(out) > MAX_HELPERS:
        raise UsageError(f"--rpc takes at most {MAX_HELPERS} helpers (GGML_RPC_MAX_SERVERS)")
    return tuple(out)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port), for an endpoint `parse_endpoints` returned."""
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
