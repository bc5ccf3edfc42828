"""The prompt cache's disk tier as a structure (`engines/state/prompt_disk.py` under
`engines/state/prompt_cache.py`): a state parked by one cache is restored by a new cache over the same
folder (a restart); a file that is not whole, not this model's or not this backend's is removed
and never loaded; the budget (every model's files together) is honoured, least recently used
out first; budget 0 writes nothing; the default budget from the free disk; the flag. The
sequence is a fake that records the tokens it holds; its state's bytes are those tokens, so a
restore is checked by what the sequence then holds. The real engines: test_prompt_disk_engines.py."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from pocketchat.engines.state.prefix_cache import PrefixCache
from pocketchat.engines.state.prompt_cache import PromptCache
from pocketchat.engines.state.prompt_disk import SUFFIX, DiskTier, tokens_digest
from pocketchat.select.fit import prompt_cache_disk_budget

GiB = 1024**3
KEY = {"model": "/models/a.gguf", "size": 123, "mtime": 456, "backend": "llama.cpp",
       "n_ctx": 4096, "kv_type": "f16"}
OTHER = {**KEY, "model": "/models/b.gguf"}


class BytesSeq:
    """A sequence whose state is the tokens it holds, 4 bytes each (int32)."""

    partial = False

    def __init__(self, *, trimmable: bool = True, fmt: str = "fake 1") -> None:
        self.trimmable = trimmable
        self.held: list[int] = []
        self.fmt = fmt

    def trim(self, n: int) -> bool:
        if not self.trimmable and n < len(self.held):
            return False
        del self.held[n:]
        return True

    def snapshot(self):
        return list(self.held), 4 * len(self.held)

    def restore(self, state, n: int) -> None:
        self.held = list(state)[:n]

    def clear(self) -> None:
        self.held = []

    def seq_bytes(self) -> int:
        return 4 * len(self.held)

    def save_seq(self):
        data = bytearray(struct.pack(f"<{len(self.held)}i", *self.held))
        return data, len(data)

    def load_seq(self, state) -> bool:
        self.held = list(struct.unpack(f"<{len(state) // 4}i", bytes(state)))
        return True

    def seq_format(self) -> str:
        return self.fmt

    @staticmethod
    def seq_payload(state):
        return state

    @staticmethod
    def seq_from_payload(payload: bytearray):
        return payload


def engine(root: Path, *, key=KEY, disk: int = 1 << 20, ram: int = 1 << 20, fmt: str = "fake 1"
           ) -> tuple[PromptCache, PrefixCache, BytesSeq]:
    """A cache with a disk tier over `root`, and one sequence: what an engine holds."""
    seq = BytesSeq(fmt=fmt)
    return PromptCache(ram, min_shared=4, disk=DiskTier(root, key, disk)), PrefixCache(seq), seq


def ask(pc: PromptCache, live: PrefixCache, seq: BytesSeq, prompt: list[int]) -> int:
    """One prompt as the engine takes it; returns the tokens kept (not evaluated)."""
    pc.prepare(live, prompt)
    kept = live.prepare(prompt).keep
    seq.held.extend(prompt[kept:])
    live.tokens = list(prompt)
    return kept


SYSTEM = list(range(1000, 1100))  # a long shared prefix: 100 tokens


def park_shared(root: Path, **kw) -> PromptCache:
    pc, live, seq = engine(root, **kw)
    ask(pc, live, seq, SYSTEM + [1])
    seq.held, live.tokens = list(SYSTEM), list(SYSTEM)
    assert pc.park(seq, SYSTEM, shared=True)
    pc.clear()  # the engine closes: the write is finished first
    return pc


def files(root: Path) -> list[Path]:
    return sorted(root.rglob("*" + SUFFIX))


def test_a_parked_state_is_restored_by_a_new_cache_after_a_restart(tmp_path):
    first = park_shared(tmp_path)
    assert len(files(tmp_path)) == 1 and first.status()["disk"]["writes"] == 1
    pc, live, seq = engine(tmp_path)  # a new process: nothing in RAM
    kept = ask(pc, live, seq, SYSTEM + [7, 8, 9])
    assert kept == len(SYSTEM) and seq.held == SYSTEM + [7, 8, 9]
    status = pc.status()
    assert status["disk"]["hits"] == 1 and status["entries"] == 1  # now in RAM too
    live.reset()  # another conversation's state was live: SYSTEM comes from RAM now
    assert ask(pc, live, seq, SYSTEM + [5]) == len(SYSTEM)
    assert pc.status()["disk"]["hits"] == 1 and pc.status()["hits"] == 1


def test_a_state_too_large_for_ram_still_goes_to_disk(tmp_path):
    park_shared(tmp_path, ram=1)
    pc, live, seq = engine(tmp_path, ram=1)
    assert ask(pc, live, seq, SYSTEM + [2]) == len(SYSTEM) and pc.status()["entries"] == 0


def test_ram_budget_zero_turns_both_tiers_off(tmp_path):
    pc, live, seq = engine(tmp_path, ram=0)
    ask(pc, live, seq, SYSTEM + [1])
    seq.held = list(SYSTEM)
    assert not pc.enabled and not pc.park(seq, SYSTEM, shared=True)
    pc.clear()
    assert files(tmp_path) == [] and pc.status()["disk"]["writes"] == 0


def flip(path: Path, where: int) -> None:
    data = bytearray(path.read_bytes())
    data[where] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "a payload byte flipped": lambda p: flip(p, p.stat().st_size - 3),
    "a token flipped": lambda p: flip(p, p.stat().st_size - 4 * len(SYSTEM) - 2),
    "the magic": lambda p: flip(p, 0),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-10]),
    "bytes appended": lambda p: p.write_bytes(p.read_bytes() + b"xx"),
    "empty": lambda p: p.write_bytes(b""),
    "not ours": lambda p: p.write_text("hello"),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_a_file_that_is_not_whole_is_removed_and_never_loaded(tmp_path, how):
    park_shared(tmp_path)
    [path] = files(tmp_path)
    CORRUPTIONS[how](path)
    pc, live, seq = engine(tmp_path)
    assert ask(pc, live, seq, SYSTEM + [7]) == 0 and seq.held == SYSTEM + [7]
    assert not path.exists() and pc.status()["disk"]["hits"] == 0


def test_another_models_file_is_removed_from_this_models_folder(tmp_path):
    park_shared(tmp_path, key=OTHER)
    [theirs] = files(tmp_path)
    mine = DiskTier(tmp_path, KEY, 1 << 20).folder
    mine.mkdir(parents=True, exist_ok=True)
    planted = mine / theirs.name
    planted.write_bytes(theirs.read_bytes())
    pc, live, seq = engine(tmp_path)
    assert ask(pc, live, seq, SYSTEM + [7]) == 0
    assert not planted.exists() and pc.status()["disk"]["removed"] == 1
    assert theirs.exists()  # in its own folder, the other model's file stays


def test_another_models_folder_is_not_read(tmp_path):
    park_shared(tmp_path, key=OTHER)
    pc, live, seq = engine(tmp_path)
    assert ask(pc, live, seq, SYSTEM + [7]) == 0 and len(files(tmp_path)) == 1


def test_a_file_of_another_backend_format_is_removed(tmp_path):
    park_shared(tmp_path, fmt="llama.cpp 0.3.1")
    pc, live, seq = engine(tmp_path, fmt="llama.cpp 0.3.36")
    assert ask(pc, live, seq, SYSTEM + [7]) == 0 and files(tmp_path) == []


def test_budget_zero_writes_nothing(tmp_path):
    pc = park_shared(tmp_path / "root", disk=0)
    assert not (tmp_path / "root").exists()
    assert pc.status()["disk"]["budget"] == 0 and pc.status()["disk"]["writes"] == 0


def test_a_state_larger_than_the_budget_is_never_written(tmp_path):
    pc = park_shared(tmp_path, disk=200)  # the state alone is 400 bytes
    assert files(tmp_path) == [] and pc.status()["disk"]["not_written"] == 1


def test_no_write_leaves_the_disk_nearly_full(tmp_path):
    seq = BytesSeq()
    disk = DiskTier(tmp_path, KEY, 1 << 20, reserve=1 << 60)  # "less free than the reserve"
    pc = PromptCache(1 << 20, min_shared=4, disk=disk)
    seq.held = list(SYSTEM)
    pc.park(seq, SYSTEM, shared=True)
    pc.clear()
    assert files(tmp_path) == [] and "nearly full" in pc.status()["disk"]["note"]


def write(root: Path, key, budget: int, prefix: list[int], mtime: float) -> None:
    """Park `prefix` through a cache over `root` (RAM off) and date its file `mtime`."""
    seq = BytesSeq()
    pc = PromptCache(1, min_shared=4, disk=DiskTier(root, key, budget))  # RAM: no room
    seq.held = list(prefix)
    assert pc.park(seq, prefix, shared=True)
    pc.clear()
    path = DiskTier(root, key, budget).folder / (tokens_digest(prefix) + SUFFIX)
    if path.exists():
        os.utime(path, (mtime, mtime))


ONE_FILE = 8 * (len(SYSTEM) + 1) + 400  # tokens, payload and header of one state's file


def test_the_budget_covers_every_model_and_the_least_recently_used_go_first(tmp_path):
    budget = 2 * ONE_FILE  # two files fit, three do not
    prefixes = [[p] + SYSTEM for p in range(4)]
    for i, prefix in enumerate(prefixes):
        write(tmp_path, (KEY, OTHER)[i % 2], budget, prefix, 1000 + i)
        assert sum(p.stat().st_size for p in files(tmp_path)) <= budget
    assert len(files(tmp_path)) == 2
    mine, theirs = DiskTier(tmp_path, KEY, budget), DiskTier(tmp_path, OTHER, budget)
    assert mine.longest(prefixes[2] + [1], 10**6) == tuple(prefixes[2])
    assert theirs.longest(prefixes[3] + [1], 10**6) == tuple(prefixes[3])
    assert mine.longest(prefixes[0] + [1], 10**6) is None  # the oldest two went first
    assert theirs.longest(prefixes[1] + [1], 10**6) is None


def test_a_hit_keeps_a_file_from_being_the_oldest(tmp_path):
    budget = 2 * ONE_FILE
    prefixes = [[p] + SYSTEM for p in range(3)]
    write(tmp_path, KEY, budget, prefixes[0], 1000)
    write(tmp_path, KEY, budget, prefixes[1], 1001)
    pc, live, seq = engine(tmp_path, disk=budget, ram=1)
    assert ask(pc, live, seq, prefixes[0] + [5]) == len(prefixes[0])  # now the newest
    write(tmp_path, KEY, budget, prefixes[2], time.time())
    tier = DiskTier(tmp_path, KEY, budget)
    assert tier.longest(prefixes[0] + [1], 10**6) == tuple(prefixes[0])
    assert tier.longest(prefixes[1] + [1], 10**6) is None


def test_a_conversation_parked_further_on_replaces_its_file_and_the_shared_prefix_stays(tmp_path):
    pc, live, seq = engine(tmp_path, ram=1)
    ask(pc, live, seq, SYSTEM + [1])
    seq.held, live.tokens = list(SYSTEM), list(SYSTEM)
    pc.park(seq, SYSTEM, shared=True)
    first = SYSTEM + [1, 2, 3]
    seq.held, live.tokens = list(first), list(first)
    pc.park(seq, first)
    further = first + [4, 5, 6]
    seq.held = list(further)
    pc.park(seq, further, supersedes=first)
    pc.clear()
    tier = DiskTier(tmp_path, KEY, 1 << 20)
    assert tier.longest(further + [9], 10**6) == tuple(further)
    assert tier.longest(first + [9], 10**6) == tuple(SYSTEM)  # `first` is gone, SYSTEM stays
    assert len(files(tmp_path)) == 2


def test_a_temporary_file_left_by_a_dead_process_is_removed(tmp_path):
    folder = DiskTier(tmp_path, KEY, 1 << 20).folder
    stale, fresh = folder / ("a" + SUFFIX + ".tmp-1"), folder / ("b" + SUFFIX + ".tmp-2")
    for path in (stale, fresh):
        path.write_bytes(b"x" * 10)
    os.utime(stale, (1000, 1000))
    DiskTier(tmp_path, KEY, 1 << 20)
    assert not stale.exists() and fresh.exists()  # fresh: another process may be writing it


def test_status_shows_both_tiers(tmp_path):
    park_shared(tmp_path)
    pc, live, seq = engine(tmp_path, disk=1 << 20)
    ask(pc, live, seq, SYSTEM + [3])
    status = pc.status()
    assert {"entries", "bytes", "budget", "hits"} <= set(status)
    disk = status["disk"]
    assert disk["entries"] == 1 and disk["budget"] == 1 << 20 and disk["hits"] == 1
    assert 0 < disk["bytes"] == disk["used"] <= disk["budget"]
    assert PromptCache(1 << 20).status()["disk"]["budget"] == 0  # no disk tier: shown as off


@pytest.mark.parametrize("free,expected", [
    (None, 0),  # unknown: nothing written
    (0, 0),
    (7 * GiB, 0),  # nearly full: nothing written
    (8 * GiB, int(8 * GiB * 0.05)),
    (100 * GiB, 5 * GiB),
    (160 * GiB, 8 * GiB),
    (4000 * GiB, 8 * GiB),  # at most 8 GiB
])
def test_the_default_disk_budget_is_a_share_of_the_free_disk(free, expected):
    assert prompt_cache_disk_budget(free) == expected


def test_the_plan_takes_the_default_and_the_flag(monkeypatch):
    from pocketchat.choose.selection import Selection
    from pocketchat.select import fit
    from pocketchat.select.profile import load_profile

    from pocketchat.select import catalog

    profile = load_profile(Path(__file__).parent / "profiles" / "linux-32gb.json")
    chosen = fit.plan(profile, catalog.builds()).recommended
    assert chosen is not None and chosen.plan is not None
    assert chosen.plan.prompt_cache_disk_bytes > 0
    assert chosen.plan.prompt_cache_disk_bytes == prompt_cache_disk_budget(profile.disk_free_bytes)
    assert Selection(prompt_cache_disk_mb=0).applied(chosen.plan).prompt_cache_disk_bytes == 0
    assert Selection(prompt_cache_disk_mb=300).applied(
        chosen.plan).prompt_cache_disk_bytes == 300 * 1024**2


@pytest.mark.parametrize("command", [["serve"], []])
def test_a_negative_disk_budget_is_refused_with_what_to_do(capsys, command):
    from pocketchat import cli

    code = cli.main(command + ["--offline", "--prompt-cache-disk-mb", "-5"])
    err = capsys.readouterr().err
    assert code != 0 and "--prompt-cache-disk-mb must be 0 or more" in err and "0 turns it off" in err


def test_help_says_what_the_disk_tier_costs(capsys):
    from pocketchat import cli

    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--prompt-cache-disk-mb" in out and "written once" in out and "0: off" in out
