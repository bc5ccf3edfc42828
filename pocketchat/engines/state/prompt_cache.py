"""The prompt cache across conversations: whole sequence states of recent conversations in RAM.

`prefix_cache.PrefixCache` keeps one conversation: the live sequence and its checkpoints. When
requests alternate between conversations (A, B, A, B through `pocketchat serve`), each prompt
would throw the other's state away and re-read its whole conversation. `PromptCache` keeps
copies of whole sequence states (attention KV and recurrent parts together: for a hybrid model
the only way back to a point without re-reading it), keyed by their exact token prefix:

- a state is *parked* just before the live state is left for a prompt it does not lead to
  (another conversation, an edit), at a message boundary: where the engine settled it after
  the answer (it ends where the next prompt goes on), else (an answer cancelled, or all
  reasoning) back at its newest checkpoint, the end of the last user message;
- a *shared* prefix: the state at the end of a long first system message (system prompt and
  tools, at least `MIN_SHARED_TOKENS` tokens) is parked the first time a prompt is evaluated
  past it, and every conversation that starts with it continues from there;
- a prompt continues from the longest parked prefix of it, when that is longer than what the
  live state (or one of its checkpoints) gives; the parked copy stays (a cancelled answer loses
  nothing) and is dropped when the state that came from it is parked again further on;
- entries are bounded in bytes (`budget`): least recently used go first; a state larger than
  the budget is never kept, so the bytes held never exceed the budget. Budget 0: off;
- with a disk tier (`prompt_disk.DiskTier`, the plan's `prompt_cache_disk_bytes`), every state
  parked is also written to a file (shared prefixes first), and a prompt that continues a state
  on disk longer than what RAM gives is restored from it, after a restart too (a state too
  large for the RAM budget may still go to disk; RAM budget 0 turns both off).

Pure bookkeeping over a small protocol (`SeqOps`), like `PrefixCache` over `StateOps`: the
caller passes the operations of the sequence it parks from or restores into, so several
sequences can share one cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from pocketchat.engines.state.prefix_cache import PrefixCache, common_prefix, plan_reuse
from pocketchat.engines.state.prompt_disk import DiskTier, off_status, state_format

MIN_SHARED_TOKENS = 256  # a first system message this long is parked once and shared


class SeqOps(Protocol):
    """Whole-sequence copies of one sequence's state (KV and recurrent parts)."""

    def seq_bytes(self) -> int:
        """The size a copy of the sequence's state would take now."""

    def save_seq(self) -> tuple[Any, int]:
        """(a copy of the whole sequence state, its size in bytes)."""

    def load_seq(self, state: Any) -> bool:
        """Replace the sequence's state by the copy `state`; False when it did not load."""

    # for the disk tier (optional: without them a backend's states stay in RAM)
    def seq_format(self) -> str:
        """What a state's bytes depend on beyond the model (the backend and its version)."""

    def seq_payload(self, state: Any) -> Any:
        """A copy's bytes (a buffer) as written to disk."""

    def seq_from_payload(self, payload: bytearray) -> Any:
        """A copy made from bytes `seq_payload` gave."""


@dataclass
class Entry:
    tokens: tuple[int, ...]
    state: Any
    nbytes: int
    shared: bool = False  # a shared prefix (a long system message), not one conversation


class PromptCache:
    """Parked sequence states, least recently used first, within `budget` bytes."""

    def __init__(self, budget: int, *, min_shared: int = MIN_SHARED_TOKENS,
                 note: str = "", disk: DiskTier | None = None) -> None:
        self.budget = max(int(budget), 0)
        self.disk = disk  # the disk tier (None or budget 0: RAM only)
        self.min_shared = min_shared
        self.note = note  # why it is off, when it is (e.g. the backend cannot copy its state)
        self._entries: OrderedDict[tuple[int, ...], Entry] = OrderedDict()  # oldest first
        self._bytes = 0
        self._lock = threading.Lock()  # status() may be read from another thread
        self._origin: dict[int, tuple[int, ...]] = {}  # id(live cache): the entry it came from
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        """On with a RAM budget (budget 0 turns both tiers off; a state larger than the RAM
        budget may still go to disk)."""
        return self.budget > 0

    def _disk(self) -> DiskTier | None:
        return self.disk if self.disk is not None and self.disk.enabled else None

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[tuple[int, ...]]:
        """The parked prefixes, least recently used first."""
        with self._lock:
            return list(self._entries)

    # -- the structure ----------------------------------------------------------------------

    def find(self, prompt: Sequence[int], *, limit: int | None = None) -> Entry | None:
        """The longest entry whose tokens are a prefix of `prompt` and at most `limit` long."""
        prompt = tuple(prompt)
        limit = len(prompt) if limit is None else limit
        best: Entry | None = None
        with self._lock:
            for key, entry in self._entries.items():
                if (len(key) <= limit and (best is None or len(key) > len(best.tokens))
                        and prompt[: len(key)] == key):
                    best = entry
        return best

    def put(self, tokens: Sequence[int], state: Any, nbytes: int, *, shared: bool = False
            ) -> bool:
        """Keep `state` (the state after `tokens`) as the newest entry, evicting the least
        recently used until it fits; False (nothing kept) when it is larger than the budget."""
        key = tuple(tokens)
        if not key or nbytes > self.budget:
            return False
        with self._lock:
            self._drop(key)
            while self._entries and self._bytes + nbytes > self.budget:
                self._drop(next(iter(self._entries)))
            self._entries[key] = Entry(key, state, nbytes, shared)
            self._bytes += nbytes
        return True

    def touch(self, tokens: Sequence[int]) -> bool:
        """Mark the entry for `tokens` as just used; False when there is none."""
        key = tuple(tokens)
        with self._lock:
            if key not in self._entries:
                return False
            self._entries.move_to_end(key)
            return True

    def _drop(self, key: tuple[int, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes

    def clear(self) -> None:
        """Empty the RAM tier (the engine closes); states waiting for the disk are written
        first, and the disk tier stays for the next engine."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._origin.clear()
        if self.disk is not None:
            self.disk.flush()

    # -- with a sequence --------------------------------------------------------------------

    def park(self, ops: SeqOps, tokens: Sequence[int], *, shared: bool = False,
             supersedes: Sequence[int] | None = None) -> bool:
        """Copy the sequence state (which holds exactly `tokens`) into the cache, and to the
        disk tier when it has none for these tokens; True when it is kept (already there: only
        marked as used). `supersedes`: the entry this state was restored from, dropped when it
        is a shorter prefix of it (the same conversation, further on), unless shared."""
        if not self.enabled or not tokens:
            return False
        key = tuple(tokens)
        disk = self._disk() if hasattr(ops, "seq_payload") else None
        old = tuple(supersedes or ())
        if not (old and len(old) < len(key) and key[: len(old)] == old):
            old = ()
        kept = self.touch(key)
        on_disk = disk is None or disk.has(key)
        if disk is not None and on_disk:
            disk.touch(key)
        if kept and on_disk:
            return True
        try:
            if kept:
                with self._lock:
                    state = self._entries[key].state
            else:
                room = max(self.budget, disk.budget if disk is not None else 0)
                if ops.seq_bytes() > room:  # never copied only to be thrown away
                    return False
                state, nbytes = ops.save_seq()
                kept = self.put(key, state, nbytes, shared=shared)
            if not on_disk:
                if old:
                    disk.drop(old)  # type: ignore[union-attr]  # its place in the queue too
                kept = disk.put(key, ops.seq_payload(state), shared=shared,  # type: ignore[union-attr]
                                fmt=state_format(ops)) or kept
        except Exception:  # noqa: BLE001 - a cache: a copy that fails costs time, not the answer
            return kept
        if kept and old:
            with self._lock:
                if old in self._entries and not self._entries[old].shared:
                    self._drop(old)
            if disk is not None:
                disk.drop(old)
        return kept

    def keep_all(self, lives: Sequence[tuple[PrefixCache, bool]], timeout: float | None = None
                 ) -> int:
        """Before the engine ends for a while (an idle unload): park each live state (`lives`:
        a sequence's live cache and whether it ends at a message boundary, as `prepare` parks
        one a prompt leaves), then write each state the RAM tier holds and the disk tier does
        not, newest first, one at a time (none dropped for a busy writer), waiting for each;
        the states written. Nothing without a disk tier."""
        disk = self._disk()
        if not self.enabled or disk is None:
            return 0
        before = disk.writes
        disk.flush(timeout)
        for live, at_boundary in lives:
            if live.tokens and (at_boundary or self._back_to_checkpoint(live)):
                self.park(live.ops, live.tokens,  # type: ignore[arg-type]
                          supersedes=self._origin.pop(id(live), None))
                disk.flush(timeout)
        ops = lives[0][0].ops if lives else None
        if ops is not None and hasattr(ops, "seq_payload"):
            for key in reversed(self.keys()):
                with self._lock:
                    entry = self._entries.get(key)
                if entry is None or disk.has(key):
                    continue
                try:
                    disk.put(key, ops.seq_payload(entry.state), shared=entry.shared,
                             fmt=state_format(ops))
                except Exception:  # noqa: BLE001 - a cache: what is not written is read again
                    continue
                disk.flush(timeout)
        return disk.writes - before

    def prepare(self, live: PrefixCache, prompt: Sequence[int], *, leave: int = 1,
                at_boundary: bool = False) -> Entry | None:
        """Before `live.prepare(prompt)`: park the live state if the prompt leaves it (and it
        ends at a message boundary), and bring a parked state into the sequence when it gives
        more of the prompt than the live state does. Returns the entry restored (None: the
        live state stays as it was for `live.prepare`)."""
        if not self.enabled:
            return None
        cached = live.tokens
        if len(cached) <= len(prompt) - leave and prompt[: len(cached)] == cached:
            own = len(cached)  # the prompt goes on from the live state (the usual turn)
        else:
            own = plan_reuse(cached, prompt, trimmable=live.trimmable, leave=leave,
                             checkpoints=[c.tokens for c in live.checkpoints]).keep
        entry = self.find(prompt, limit=max(0, len(prompt) - leave))
        if entry is not None and len(entry.tokens) <= own:
            entry = None
        from_disk = self._from_disk(live, prompt, max(0, len(prompt) - leave),
                                    max(own, len(entry.tokens) if entry is not None else 0))
        entry = from_disk or entry
        leaves = len(cached) > own or entry is not None
        if leaves and cached:
            origin = self._origin.pop(id(live), None)
            if at_boundary or self._back_to_checkpoint(live):
                self.park(live.ops, live.tokens, supersedes=origin)  # type: ignore[arg-type]
        if entry is None:
            if leaves or not cached:
                self.misses += 1
            return None
        if not live.ops.load_seq(entry.state):  # type: ignore[attr-defined]
            live.reset()
            self.misses += 1
            if from_disk is not None:  # bytes this backend does not take: never again
                with self._lock:
                    self._drop(from_disk.tokens)
                self.disk.discard(from_disk.tokens)  # type: ignore[union-attr]
            return None
        if from_disk is None:
            self.hits += 1
            if self._disk() is not None:
                self._disk().touch(entry.tokens)  # type: ignore[union-attr]
        self.touch(entry.tokens)
        self._origin[id(live)] = entry.tokens
        live.tokens = list(entry.tokens)
        live.checkpoints = [c for c in live.checkpoints
                            if common_prefix(c.tokens, entry.tokens) == len(c.tokens)]
        return entry

    def _from_disk(self, live: PrefixCache, prompt: Sequence[int], limit: int, beats: int
                   ) -> Entry | None:
        """The longest state on disk that is a prefix of `prompt`, at most `limit` and more
        than `beats` tokens long, read (and kept in RAM when it fits); None without one."""
        disk = self._disk()
        if disk is None or not hasattr(live.ops, "seq_from_payload"):
            return None
        key = disk.longest(prompt, limit)
        if key is None or len(key) <= beats:
            return None
        got = disk.load(key, live.ops)
        if got is None:
            return None
        state, nbytes, shared = got
        self.put(key, state, nbytes, shared=shared)
        return Entry(key, state, nbytes, shared)

    @staticmethod
    def _back_to_checkpoint(live: PrefixCache) -> bool:
        """Bring a state that ends mid-answer (cancelled, or all reasoning) back to its newest
        checkpoint, the end of the last user message: a boundary. False when it has none."""
        newest = live.checkpoint_tokens
        if not newest or live.tokens[: len(newest)] != newest:
            return False
        live.truncate(len(newest))
        return live.tokens == newest

    def status(self) -> dict[str, Any]:
        """Live figures of the RAM tier (entries, bytes, budget, hits, misses, hit rate) and,
        under "disk", the disk tier's (entries, bytes, budget, hits, writes, ...)."""
        asked = self.hits + self.misses
        body: dict[str, Any] = {
            "entries": len(self._entries), "bytes": self._bytes, "budget": self.budget,
            "hits": self.hits, "misses": self.misses,
            "hit_rate": round(self.hits / asked, 3) if asked else None,
        }
        body["disk"] = self.disk.status() if self.disk is not None else off_status()
        if self.note:
            body["note"] = self.note
        return body


def for_engine(ops: Any, plan: Any, key: dict[str, Any]) -> PromptCache:
    """The cache across conversations of an engine whose states `ops` copies: the plan's RAM
    budget and its disk tier under `key` (off where the backend cannot copy a whole sequence
    state)."""
    if not hasattr(ops, "save_seq"):
        return PromptCache(0, note="this backend cannot copy its sequence state: no prompt "
                                   "cache across conversations")
    return PromptCache(int(getattr(plan, "prompt_cache_bytes", 0) or 0),
                       disk=DiskTier.open(plan, key))
