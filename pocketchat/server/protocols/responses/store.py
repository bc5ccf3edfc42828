"""Stored responses (`store`, the default): each response's body and the whole input that
led to it with its output, so that `previous_response_id` continues it. In RAM only, within a
bound: the oldest go first once MAX_STORED are kept or their text passes MAX_STORED_CHARS."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

MAX_STORED = 256
MAX_STORED_CHARS = 64 * 1024 * 1024


class ResponseStore:
    """id -> (response body, input items with the output as input items)."""

    def __init__(self, limit: int = MAX_STORED, max_chars: int = MAX_STORED_CHARS) -> None:
        self.limit, self.max_chars = limit, max_chars
        self._kept: OrderedDict[str, tuple[dict, tuple[dict, ...], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, body: dict[str, Any], items: tuple[dict, ...]) -> None:
        size = len(json.dumps(body)) + len(json.dumps(items))
        with self._lock:
            self._drop(body["id"])
            self._kept[body["id"]] = (body, items, size)
            self._chars += size
            while self._kept and (len(self._kept) > self.limit or self._chars > self.max_chars):
                self._drop(next(iter(self._kept)))

    def body(self, rid: str) -> dict | None:
        with self._lock:
            kept = self._kept.get(rid)
            return None if kept is None else kept[0]

    def items(self, rid: str) -> tuple[dict, ...] | None:
        """The input and output of a stored response, as the next request's first items."""
        with self._lock:
            kept = self._kept.get(rid)
            return None if kept is None else kept[1]

    def delete(self, rid: str) -> bool:
        with self._lock:
            return self._drop(rid)

    def _drop(self, rid: str) -> bool:
        kept = self._kept.pop(rid, None)
        if kept is not None:
            self._chars -= kept[2]
        return kept is not None

    def __len__(self) -> int:
        return len(self._kept)
