"""The prompt cache's disk tier: parked sequence states in files, read back after a restart.

`prompt_cache.PromptCache` parks whole sequence states in RAM; this tier writes the states it
parks (the long shared system-and-tools prefix first) to files under the cache folder
(`paths.Settings.prompt_cache_dir`), so an agent's long prompt is read once per machine, not
once per server start. One folder per model identity: the `saved_state.state_key` of the
model file (path, size, modification time), backend, context size and KV cache type. A file:

    MAGIC | u32 header length | header (JSON: key, format, tokens, payload, shared, the CRC-32
          of the tokens, that of tokens and payload) | the tokens (int32, little-endian)
          | the backend's payload (`SeqOps.seq_payload`)

- written atomically (a temporary file in the same folder, then a rename) by one background
  thread, so a park costs the request no disk time; states waiting to be written are few
  (`MAX_PENDING`), shared prefixes before conversations;
- a file is indexed only when its header names this model's key, its length is what the
  header says and its tokens' CRC-32 matches (read at start: headers and tokens only), and
  loaded only when its header names the backend's state format (`SeqOps.seq_format`) and
  the CRC-32 of its tokens and payload matches; any other file in the folder (truncated, bytes flipped, another model's
  or another llama.cpp's) is removed, never loaded;
- the budget covers every model's folder: the least recently used files (modification time:
  a hit touches it) go first; a state larger than the budget is never written, and no write
  leaves less than `RESERVE_BYTES` free on the disk. Budget 0: nothing is read or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

MAGIC = b"PKTCHPC1"  # pocketchat prompt cache, file format 1
SUFFIX = ".pcs"
TMP = ".tmp-"  # a file being written: `<name>.tmp-<pid>`, renamed when whole
MAX_PENDING = 2  # states waiting for the writer (each holds a whole state in RAM)
RESERVE_BYTES = 2 * 1024**3  # never write when the disk would be left with less free
STALE_TMP_SECONDS = 3600  # a temporary file this old was left by a process that died
_HEAD = struct.Struct("<8sI")


def key_digest(key: dict[str, Any]) -> str:
    """The folder name of one model identity."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:32]


@dataclass
class DiskEntry:
    tokens: tuple[int, ...]
    path: Path
    nbytes: int  # the file's size
    shared: bool


class DiskTier:
    """The files of one model identity under `root`, within `budget` bytes for all of root."""

    def __init__(self, root: Path, key: dict[str, Any], budget: int, *,
                 reserve: int = RESERVE_BYTES) -> None:
        self.root = Path(root)
        self.key = dict(key)
        self.budget = max(int(budget), 0)
        self.reserve = reserve
        self.folder = self.root / key_digest(self.key)
        self._index: dict[tuple[int, ...], DiskEntry] = {}
        self._lock = threading.Lock()  # the index and figures (engine, writer, status)
        self._cond = threading.Condition(self._lock)
        self._pending: list[tuple[tuple[int, ...], Any, bool, str]] = []
        self._writing = 0
        self._thread: threading.Thread | None = None
        self.hits = 0
        self.writes = 0
        self.written_bytes = 0
        self.write_seconds = 0.0
        self.read_seconds = 0.0
        self.removed = 0  # files skipped and removed: corrupt, truncated, another model's
        self.dropped = 0  # states not written: larger than the budget, disk full, writer busy
        self.note = ""
        if self.enabled:
            self._scan()

    @classmethod
    def open(cls, plan: Any, key: dict[str, Any], root: Path | None = None) -> "DiskTier":
        """The disk tier of an engine loaded with `plan` under `key` (`saved_state.state_key`);
        its budget is the plan's `prompt_cache_disk_bytes` (0: off)."""
        if root is None:
            from pocketchat.paths import settings

            root = settings().prompt_cache_dir
        return cls(root, key, int(getattr(plan, "prompt_cache_disk_bytes", 0) or 0))

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    # -- the index ------------------------------------------------------------------------

    def _scan(self) -> None:
        """Index this model's files (their headers only); remove the ones that are not whole
        or not this model's, and temporary files left by a process that died."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            names = list(os.scandir(self.folder))
        except OSError as exc:
            self.note = f"the prompt cache folder cannot be used: {exc.strerror or exc}"
            self.budget = 0
            return
        for item in names:
            path = Path(item.path)
            if TMP in item.name:
                try:
                    if time.time() - item.stat().st_mtime > STALE_TMP_SECONDS:
                        path.unlink()
                except OSError:
                    pass
                continue
            head = self._read_head(path) if item.name.endswith(SUFFIX) else None
            if head is None:
                self._remove(path)
                continue
            meta, tokens, _ = head
            self._index[tokens] = DiskEntry(tokens, path, item.stat().st_size,
                                            bool(meta.get("shared")))

    def _read_head(self, path: Path, f: Any = None) -> tuple[dict, tuple[int, ...], int] | None:
        """(header, tokens, payload offset) of a whole file of this model; None otherwise."""
        try:
            own = f is None
            f = open(path, "rb") if own else f
            try:
                magic, hlen = _HEAD.unpack(f.read(_HEAD.size))
                if magic != MAGIC or hlen > 1 << 20:
                    return None
                meta = json.loads(f.read(hlen))
                n, payload = int(meta["tokens"]), int(meta["payload"])
                if meta.get("key") != self.key or n <= 0:
                    return None
                raw = f.read(4 * n)
                offset = _HEAD.size + hlen + 4 * n
                if (len(raw) != 4 * n or zlib.crc32(raw) != int(meta["tokens_crc32"])
                        or os.fstat(f.fileno()).st_size != offset + payload):
                    return None
                meta["_raw"] = raw
                return meta, tuple(struct.unpack(f"<{n}i", raw)), offset
            finally:
                if own:
                    f.close()
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return None

    def _remove(self, path: Path) -> None:
        try:
            path.unlink()
            self.removed += 1
        except FileNotFoundError:
            pass
        except OSError:
            pass

    def longest(self, prompt: Sequence[int], limit: int) -> tuple[int, ...] | None:
        """The longest indexed prefix of `prompt` at most `limit` tokens long."""
        prompt = tuple(prompt)
        best: tuple[int, ...] | None = None
        with self._lock:
            for key in self._index:
                if (len(key) <= limit and (best is None or len(key) > len(best))
                        and prompt[: len(key)] == key):
                    best = key
        return best

    def has(self, tokens: Sequence[int]) -> bool:
        """Whether a state for exactly `tokens` is on disk (or waiting to be written)."""
        key = tuple(tokens)
        with self._lock:
            return key in self._index or any(p[0] == key for p in self._pending)

    def touch(self, tokens: Sequence[int]) -> None:
        with self._lock:
            entry = self._index.get(tuple(tokens))
        if entry is not None:
            try:
                os.utime(entry.path)
            except OSError:
                pass

    # -- reading --------------------------------------------------------------------------

    def load(self, tokens: Sequence[int], ops: Any) -> tuple[Any, int, bool] | None:
        """(the state, its RAM bytes, shared) read from the file for `tokens`; None when there
        is none or it is not whole and this model's (then it is removed)."""
        key = tuple(tokens)
        with self._lock:
            entry = self._index.get(key)
        if entry is None:
            return None
        started = time.perf_counter()
        state = None
        try:
            with open(entry.path, "rb") as f:
                head = self._read_head(entry.path, f)
                if head is not None and head[1] == key and head[0].get("format") == state_format(ops):
                    meta = head[0]
                    buf = bytearray(int(meta["payload"]))
                    if f.readinto(buf) == len(buf) and zlib.crc32(
                            buf, zlib.crc32(meta["_raw"])) == int(meta["crc32"]):
                        state = ops.seq_from_payload(buf)
        except FileNotFoundError:  # another process evicted it
            self.forget(key)
            return None
        except Exception:  # noqa: BLE001 - a file that does not load is removed, never used
            state = None
        if state is None:
            self.forget(key)
            self._remove(entry.path)
            return None
        with self._lock:
            self.hits += 1
            self.read_seconds += time.perf_counter() - started
        self.touch(key)
        return state, len(buf), entry.shared

    def discard(self, tokens: Sequence[int]) -> None:
        """Remove the file for `tokens` (read whole, but the backend did not take it)."""
        with self._lock:
            entry = self._index.pop(tuple(tokens), None)
        if entry is not None:
            self._remove(entry.path)

    def forget(self, tokens: Sequence[int]) -> None:
        with self._lock:
            self._index.pop(tuple(tokens), None)

    def drop(self, tokens: Sequence[int]) -> None:
        """Remove the state for `tokens` (superseded by a longer one of the same conversation),
        written or waiting; a shared prefix stays."""
        key = tuple(tokens)
        with self._lock:
            self._pending = [p for p in self._pending if p[0] != key or p[2]]
            entry = self._index.get(key)
            if entry is None or entry.shared:
                return
            del self._index[key]
        if entry is not None:
            try:
                entry.path.unlink()
            except OSError:
                pass

    # -- writing --------------------------------------------------------------------------

    def put(self, tokens: Sequence[int], payload: Any, *, shared: bool, fmt: str) -> bool:
        """Queue `payload` (the state after `tokens`) for the writer; False when it is not
        written: already there, too large, or the writer is behind (a shared prefix then
        takes the place of a waiting conversation)."""
        key = tuple(tokens)
        size = len(memoryview(payload).cast("B")) + 4 * len(key) + 512
        if not self.enabled or not key:
            return False
        if size > self.budget:
            self.dropped += 1
            return False
        with self._lock:
            if key in self._index or any(p[0] == key for p in self._pending):
                return False
            if len(self._pending) >= MAX_PENDING:
                unshared = [p for p in self._pending if not p[2]]
                if not shared or not unshared:
                    self.dropped += 1
                    return False
                self._pending.remove(unshared[0])
                self.dropped += 1
            job = (key, payload, shared, fmt)
            self._pending.insert(sum(1 for p in self._pending if p[2]) if shared
                                 else len(self._pending), job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._writer, name="prompt-disk",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the states queued are written; False when `timeout` ran out first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._writing:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _writer(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    if not self._cond.wait(30):
                        if not self._pending:
                            self._thread = None
                            return
                job = self._pending.pop(0)
                self._writing += 1
            try:
                self._write(*job)
            except Exception as exc:  # noqa: BLE001 - a cache: a failed write costs a re-read
                self.note = f"a prompt state was not written: {exc}"
            finally:
                with self._lock:
                    self._writing -= 1
                    self._cond.notify_all()

    def _write(self, tokens: tuple[int, ...], payload: Any, shared: bool, fmt: str) -> None:
        started = time.perf_counter()
        view = memoryview(payload).cast("B")
        raw = struct.pack(f"<{len(tokens)}i", *tokens)
        meta = json.dumps({"key": self.key, "format": fmt, "tokens": len(tokens),
                           "payload": len(view), "shared": shared,
                           "tokens_crc32": zlib.crc32(raw),
                           "crc32": zlib.crc32(view, zlib.crc32(raw))}).encode()
        size = _HEAD.size + len(meta) + len(raw) + len(view)
        if size > self.budget or not self._make_room(size):
            self.dropped += 1
            return
        path = self.folder / (tokens_digest(tokens) + SUFFIX)
        tmp = path.with_name(f"{path.name}{TMP}{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "wb") as f:
                f.write(_HEAD.pack(MAGIC, len(meta)))
                f.write(meta)
                f.write(raw)
                f.write(view)
            os.replace(tmp, path)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
        with self._lock:
            self._index[tokens] = DiskEntry(tokens, path, size, shared)
            self.writes += 1
            self.written_bytes += size
            self.write_seconds += time.perf_counter() - started

    def _files(self) -> list[tuple[float, int, Path]]:
        """(modification time, size, path) of every model's state files under root."""
        found = []
        try:
            folders = [e for e in os.scandir(self.root) if e.is_dir()]
        except OSError:
            return []
        for folder in folders:
            try:
                for item in os.scandir(folder.path):
                    if item.name.endswith(SUFFIX):
                        st = item.stat()
                        found.append((st.st_mtime, st.st_size, Path(item.path)))
            except OSError:
                continue
        return found

    def _make_room(self, size: int) -> bool:
        """Remove the least recently used files (any model's) until `size` more bytes fit
        the budget; False when the disk would be left with less than the reserve free."""
        files = sorted(self._files())
        used = sum(s for _, s, _ in files)
        for _, nbytes, path in files:
            if used + size <= self.budget:
                break
            try:
                path.unlink()
            except OSError:
                continue
            used -= nbytes
            with self._lock:
                for key, entry in list(self._index.items()):
                    if entry.path == path:
                        del self._index[key]
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError:
            return False
        if free - size < self.reserve:
            self.note = "the disk is nearly full: prompt states are not written"
            return False
        return used + size <= self.budget

    # -- figures --------------------------------------------------------------------------

    def used(self) -> int:
        """Bytes of every model's state files under root (what the budget covers)."""
        return sum(s for _, s, _ in self._files()) if self.enabled else 0

    def status(self) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {
                "entries": len(self._index), "bytes": sum(e.nbytes for e in self._index.values()),
                "budget": self.budget, "hits": self.hits, "writes": self.writes,
                "written_bytes": self.written_bytes,
                "write_seconds": round(self.write_seconds, 3),
                "read_seconds": round(self.read_seconds, 3), "removed": self.removed,
                "not_written": self.dropped, "pending": len(self._pending) + self._writing,
            }
        body["used"] = self.used()
        if self.enabled:
            body["folder"] = str(self.folder)
        if self.note:
            body["note"] = self.note
        return body


def state_format(ops: Any) -> str:
    """The backend's state format (a file in another is not loaded)."""
    fmt = getattr(ops, "seq_format", None)
    return fmt() if callable(fmt) else type(ops).__name__


def off_status() -> dict[str, Any]:
    """The disk tier's figures when the engine has none."""
    return {"entries": 0, "bytes": 0, "budget": 0, "hits": 0, "writes": 0}
