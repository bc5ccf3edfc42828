"""Pooling planned for hand-made machines: which build the pool runs, the split, and whether it pays."""

from __future__ import annotations

import json

import pytest

from pocketchat.rpc.endpoints import parse_endpoints
from pocketchat.errors import UsageError
from pocketchat.select import catalog, estimate, pool
from pocketchat.select.profile import load_profile, profile_from_json
from pocketchat.types import GiB, Helper

from support import PROFILES

GBE = dict(rtt_seconds=0.4e-3, throughput_bytes_s=110e6)  # gigabit Ethernet
SLOW = dict(rtt_seconds=8e-3, throughput_bytes_s=2.5e6)  # a weak Wi-Fi link


def helper(gib: int, link: dict, *, cpu: bool = True, free_gib: float | None = None) -> Helper:
    total = gib * GiB
    free = total if cpu else int((free_gib or gib) * GiB)
    return Helper(f"10.0.0.{gib}:50052", free, total, reports_total_as_free=cpu, **link)


def advise(machine: str, helpers: list[Helper], lang: str = "en"):
    return pool.advise(load_profile(PROFILES / f"{machine}.json"), helpers, catalog.builds(), lang=lang)


# machine, helpers, pooled build, worth it, words the verdict must contain
CASES = [
    ("linux-16gb", [helper(16, GBE)], "POCKET-35B-Q4_K_M", True, "pooling pays"),
    ("linux-32gb", [helper(16, SLOW)], "POCKET-35B-Q4_K_M", False, "already fits this machine alone"),
    ("linux-32gb", [helper(16, GBE)], "POCKET-35B-Q4_K_M", False, "does not pay"),
    ("linux-16gb", [helper(16, SLOW)], None, False, "too slow"),
    # Q3_K_M misses this pool by less than the 252 MB the prompt cache's checkpoints take here
    ("linux-16gb", [helper(8, GBE)], "POCKET-35B-Q2_K", True, "instead of POCKET-35B-IQ1_M"),
    ("linux-16gb", [helper(8, GBE), helper(8, GBE)], "POCKET-35B-Q4_K_M", True, "pooling pays"),
    ("board-4gb", [helper(4, GBE)], None, None, None),
]


@pytest.mark.parametrize("machine,helpers,build,worth,words", CASES)
def test_pool_table(machine, helpers, build, worth, words):
    adv = advise(machine, helpers)
    if build is not None:
        assert adv.pooled is not None and adv.pooled.build.id == build, pool.format_advice(adv)
    if worth is not None:
        assert adv.worth_it is worth, adv.verdict
    if words:
        assert words in adv.verdict


def test_two_16gb_machines_get_q4_with_the_split_stated():
    adv = advise("linux-16gb", [helper(16, GBE)])
    p = adv.pooled
    assert p.build.id == "POCKET-35B-Q4_K_M" and adv.alone.recommended.build.id == "POCKET-35B-IQ1_M"
    here, there = p.split.layers
    assert here + there == pool.POCKET_LAYERS and here > 10 and there > 10
    # each machine within its budget
    assert all(m <= b for m, b in zip(p.split.memory, p.split.budgets, strict=False))
    assert p.plan.rpc_servers == ("10.0.0.16:50052",) and p.plan.rpc_layers == (there,)
    assert p.plan.n_gpu_layers == there + 1  # the output layer goes with the last helper
    text = pool.format_advice(adv)
    assert f"{here} layers here" in text and f"{there} on 10.0.0.16:50052" in text
    assert "Recommended: pool." in text and "--rpc 10.0.0.16:50052" in text
    assert "round trip 0.40 ms, throughput 110 MB/s" in text
    assert p.plan.describe() == f"{here} layers here + {there} on 10.0.0.16:50052, 8 threads"


def test_a_32gb_machine_with_a_slow_link_is_told_pooling_does_not_pay():
    adv = advise("linux-32gb", [helper(16, SLOW)])
    text = pool.format_advice(adv)
    assert not adv.worth_it and "Recommended: do not pool." in text
    assert "POCKET-35B-Q4_K_M already fits this machine alone" in text
    alone = adv.alone.recommended.estimated_decode_tok_s
    assert adv.pooled.estimated_decode_tok_s < alone / 2  # the link costs more than it gives


def test_nothing_fits_the_pool_says_why():
    adv = advise("board-4gb", [helper(4, GBE)])
    q4 = next(c for c in adv.candidates if c.build.id == "POCKET-35B-Q4_K_M")
    assert not q4.fits and "the pool holds" in q4.reason and "on the helpers" in q4.reason


def test_a_cpu_helper_counts_85_percent_of_its_ram_less_a_reserve():
    h = helper(16, GBE)
    assert pool.budget(h) == int(16 * GiB * 0.85) - pool.helper_reserve(16 * GiB)
    gpu = helper(24, GBE, cpu=False, free_gib=20)
    assert pool.budget(gpu) == 20 * GiB - pool.helper_reserve(24 * GiB)


def test_split_follows_memory_and_says_when_it_does_not_fit():
    need = estimate.MemoryNeed(weights=30 * GiB, kv_cache=0, state=0, compute=0, overhead=0)
    s = pool.split(need, 30, [10 * GiB, 20 * GiB])
    assert s.layers == (10, 20) and s.fits
    s = pool.split(need, 30, [10 * GiB, 10 * GiB])
    assert not s.fits and sum(s.layers) == 30


def test_a_faster_link_is_estimated_faster():
    prof = load_profile(PROFILES / "linux-16gb.json")
    q4 = catalog.get("POCKET-35B-Q4_K_M")
    fast = pool.pooled_tok_s(q4, prof, [helper(16, GBE)], (20, 20))
    slow = pool.pooled_tok_s(q4, prof, [helper(16, SLOW)], (20, 20))
    assert fast > 2 * slow


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:50052", ("127.0.0.1:50052",)),
    ("a:1, b:2,a:1", ("a:1", "b:2")),
])
def test_parse_endpoints(text, expected):
    assert parse_endpoints(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", ":50052", "host:0", "host:x", "host:70000"])
def test_parse_endpoints_refuses_bad_ones(text):
    with pytest.raises(UsageError, match="HOST:PORT"):
        parse_endpoints(text)


def test_profile_json_carries_llama_rpc():
    data = json.loads((PROFILES / "linux-16gb.json").read_text()) | {"llama_rpc": True}
    prof = profile_from_json(data)
    assert prof.llama_rpc is True
    assert profile_from_json(json.loads(json.dumps(prof.to_json()))) == prof
