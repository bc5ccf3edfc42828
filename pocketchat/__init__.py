"""pocketchat: pick, fetch and chat with the POCKET build that fits this machine.

From Python: `session = pocketchat.load()` (see pocketchat/api.py); imported on first use, so
`import pocketchat` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["load", "Session", "ChatResult"]

if TYPE_CHECKING:
    from pocketchat.api import ChatResult, Session, load


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pocketchat import api

        return getattr(api, name)
    raise AttributeError(f"module 'pocketchat' has no attribute {name!r}")
