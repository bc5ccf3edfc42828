"""The kernel probe (#36): measured once per machine and llama.cpp build, cached, replayable.

The fast lane scripts the probe's process (`probe.run_kernel_probe`); the slow lane runs the
real one: a small POCKET-shaped model through this machine's llama.cpp.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pocketchat.errors import HardwareProfileError
from pocketchat.paths import settings
from pocketchat.select import kernels as kern
from pocketchat.select import probe
from pocketchat.select.profile import load_profile, profile_from_json
from pocketchat.types import KernelProfile, KernelRates

from support import PROFILES

SCRIPTED = KernelProfile((KernelRates(2, (("Q2_K", "expert", 9.0), ("Q2_K", "dense", 9.5)),
                                      (("recurrent", 0.0004), ("attention", 0.0003)), 0.005),), seconds=1.0)


@pytest.fixture
def scripted_probe(monkeypatch):
    """The kernel probe's process, scripted: counts its runs; a quiet machine."""
    runs: list[list[int]] = []

    def run(threads, notes, progress=None):
        runs.append(list(threads))
        if progress:
            progress(1, 2, "scripted")
        return SCRIPTED

    monkeypatch.setattr(probe, "run_kernel_probe", run)
    monkeypatch.setattr(probe, "busy_cores", lambda *a: 0.0)
    monkeypatch.setattr(probe, "llama_build", lambda: "llama-cpp-python 0.3.36 (aaaa)")
    return runs


def _kernels(**kw):
    notes: list[str] = []
    return probe.cached_kernels("Test CPU", 2, 2, ("avx2",), notes, **kw), notes


def test_measured_once_then_read_from_the_cache(scripted_probe):
    seen = []
    got, _ = _kernels(measure=True, progress=lambda *a: seen.append(a))
    assert got is not None and got.at[0].rate("Q2_K", "expert") == 9.0
    assert got.build == "llama-cpp-python 0.3.36 (aaaa)"  # what it was measured with
    assert scripted_probe == [[2, 1]] and seen == [(1, 2, "scripted")]
    again, _ = _kernels(measure=True)
    assert again == got and len(scripted_probe) == 1
    assert (settings().cache_dir / kern.FILE_NAME).is_file()


def test_not_measured_unless_asked(scripted_probe):
    """A command that does not choose among builds reads the cache but never waits for the probe."""
    assert _kernels(measure=False)[0] is None and scripted_probe == []
    _kernels(measure=True)
    assert _kernels(measure=False)[0] is not None and len(scripted_probe) == 1


def test_measured_again_when_llama_cpp_or_the_cpu_changes(scripted_probe, monkeypatch):
    _kernels(measure=True)
    monkeypatch.setattr(probe, "llama_build", lambda: "llama-cpp-python 0.3.37 (bbbb)")
    _kernels(measure=True)
    assert len(scripted_probe) == 2
    probe.cached_kernels("Another CPU", 2, 2, ("avx2",), [], measure=True)
    assert len(scripted_probe) == 3


def test_a_busy_machine_measures_the_free_cores_and_keeps_nothing(scripted_probe, monkeypatch):
    """Beside a busy program, the counts above the free cores would time the other program, not
    the kernels: measured at the free cores only, not cached, said."""
    notes: list[str] = []
    got = probe.cached_kernels("Test CPU", 2, 2, ("avx2",), notes, measure=True, busy=1.0)
    assert got is not None and scripted_probe == [[1]]
    assert any("busy" in n for n in notes)
    assert not (settings().cache_dir / kern.FILE_NAME).exists()


def test_without_llama_cpp_nothing_is_measured(monkeypatch, scripted_probe):
    monkeypatch.setattr(probe, "llama_build", lambda: "")
    assert _kernels(measure=True)[0] is None and scripted_probe == []


@pytest.mark.slow
def test_a_failed_probe_is_a_note_and_the_bandwidth_estimate(monkeypatch):
    """The probe's process failing (a crash in a kernel, llama.cpp missing) costs the estimate
    its kernels, never the command."""
    monkeypatch.setattr(probe, "KERNEL_PROBE_MODULE", "pocketchat.no_such_module")
    notes: list[str] = []
    assert probe.run_kernel_probe([1], notes) is None
    assert notes and "kernel speeds not measured" in notes[0] and "bandwidth alone" in notes[0]


def test_kernels_round_trip_through_the_profile_json():
    profile = load_profile(PROFILES / "linux-2core-compute-bound.json")
    assert profile.kernels is not None and profile.kernels.threads() == (1, 2)
    again = profile_from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile
    assert again.kernels.at[0].rate("IQ1_M", "expert") == profile.kernels.at[0].rate("IQ1_M", "expert")


@pytest.mark.parametrize("kernels,needle", [
    ({"threads": {}}, "must be an object with 'threads'"),
    ({"threads": {"two": {"rates": {}}}}, "the key must be a thread count"),
    ({"threads": {"2": {"rates": {"Q2_K": {"experts": 9.0}}}}}, "must map 'expert' and/or 'dense'"),
    ({"threads": {"2": {"rates": {"Q2_K": {"expert": -1}}}}}, "must be a positive number"),
    ({"threads": {"2": {"rates": {}, "layers": {}}}}, "unknown key 'layers'"),
    ({"threads": {"2": {"rates": {}}}, "when": 1}, "unknown key 'when'"),
])
def test_bad_kernels_in_a_profile_name_the_problem(kernels, needle):
    data = json.loads((PROFILES / "linux-16gb.json").read_text())
    with pytest.raises(HardwareProfileError, match=needle):
        profile_from_json({**data, "kernels": kernels})
    with pytest.raises(HardwareProfileError, match="cpu_busy_cores"):
        profile_from_json({**data, "cpu_busy_cores": -1})


@pytest.mark.slow
def test_the_real_probe_measures_every_type_the_catalog_uses():
    """The probe's process on this machine's llama.cpp: a rate for each type in both roles at
    each count, the layers' and the step's seconds; through the CLI, --probe shows them and the
    next run reads the cache (the time is benchmarks/bench_recommend.py's to print)."""
    notes: list[str] = []
    got = probe.run_kernel_probe([1], notes)
    assert got is not None, notes
    (one,) = got.at
    assert one.threads == 1
    for t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_M", "IQ2_XXS"):
        for role in ("expert", "dense"):
            assert any(tt == t and ro == role and r > 0 for tt, ro, r in one.rates), (t, role)
    assert dict(one.layer_seconds)["recurrent"] > 0 and dict(one.layer_seconds)["attention"] > 0
    # a prompt's batch at the most threads: every type again, each faster per token than one
    # token decoded alone (a batch reads each expert once for all its tokens)
    prompt = got.prompt
    assert prompt is not None and prompt.threads == 1
    for t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_M", "IQ2_XXS"):
        assert prompt.rate(t, "expert") > one.rate(t, "expert"), t
    assert kern.kernels_from_json(got.to_json()) == got
    run = lambda: subprocess.run([sys.executable, "-m", "pocketchat", "--probe"],  # noqa: E731
                                 capture_output=True, text=True, timeout=300)
    first = run()
    assert first.returncode == 0, first.stderr
    assert "Kernels:   decode GB/s of weights" in first.stdout and "Q2_K" in first.stdout
    cached = (settings().cache_dir / kern.FILE_NAME).is_file()
    second = run()
    assert second.returncode == 0 and "Kernels:" in second.stdout
    if cached:  # measured on a quiet moment: the next run reads it
        assert "measured again next time" not in second.stdout
        assert json.loads((settings().cache_dir / kern.FILE_NAME).read_text())["kernels"]["threads"]


def test_the_probe_turns_timed_operations_into_rates_layers_and_a_step():
    """`summarize` (the probe's arithmetic, on scripted operation times): the best of the rounds
    per operation, a no-op's time (the dispatch) taken off each, products by weight type and
    role, an unnamed operation counted in the layer before it, the rest of the step."""
    from pocketchat.engines.llamacpp.kernels import summarize
    from pocketchat.modelfile.qwen35 import POCKET
    from dataclasses import replace

    shape = replace(POCKET, n_layer=4)  # layers 0-2 recurrent, 3 attention

    def token(slow: float = 0.0):
        return [  # op, name, weight type, bytes, weight, seconds
            ("GET_ROWS", "inp_embd", -1, 0, "", 0.0001),
            ("VIEW", "x (view)", -1, 0, "", 0.00001),
            ("MUL_MAT_ID", "ffn_moe_gate-0", 10, 10_000_000, "blk.0.ffn_gate_exps.weight", 0.00101 + slow),
            ("MUL_MAT", "attn_qkv-0", 10, 20_000_000, "blk.0.attn_qkv.weight", 0.00201),
            ("GATED_DELTA_NET", "", -1, 0, "", 0.00051),  # unnamed: layer 0's
            ("MUL_MAT_ID", "ffn_moe_down-3", 29, 3_000_000, "blk.3.ffn_down_exps.weight", 0.00101),
            ("SOFT_MAX", "attn_soft_max-3", -1, 0, "", 0.00021),
            ("RMS_NORM", "result_norm", -1, 0, "", 0.00011),
        ]

    got = summarize([token(slow=0.5), token()], plain=[0.01, 0.005], shape=shape)
    assert got["rates"]["Q2_K"] == {"expert": pytest.approx(10.0), "dense": pytest.approx(10.0)}
    assert got["rates"]["IQ1_M"] == {"expert": pytest.approx(3.0)}
    assert got["layer_s"]["recurrent"] == pytest.approx(0.0005 / 3, rel=1e-3)
    assert got["layer_s"]["attention"] == pytest.approx(0.0002, rel=1e-3)
    assert got["step_s"] == pytest.approx(0.005 - 0.004 - 0.0007, abs=1e-6)
    # the same operations as a batch of 4 tokens: each figure per token of the batch
    batch = summarize([token(slow=0.5), token()], plain=[0.01, 0.005], shape=shape, tokens=4)
    assert batch["rates"]["Q2_K"]["expert"] == pytest.approx(40.0)
    assert batch["layer_s"]["attention"] == pytest.approx(0.0002 / 4, rel=1e-3)
    assert batch["step_s"] == pytest.approx((0.005 - 0.004 - 0.0007) / 4, abs=1e-6)


def _two_counts(two: float, one: float, step: float = 0.005) -> KernelProfile:
    """A probe at 2 and 1 threads reading Q2_K at `two` and `one` GB/s."""
    def at(n, rate):
        return KernelRates(n, (("Q2_K", "expert", rate), ("Q2_K", "dense", rate)),
                           (("recurrent", 0.0004), ("attention", 0.0003)), step)
    return KernelProfile((at(2, two), at(1, one)), seconds=1.0,
                         prompt=KernelRates(2, (("Q2_K", "expert", two * 1.5),), (), step))


def test_a_probe_whose_threads_did_not_scale_is_taken_again_and_the_best_kept(scripted_probe, monkeypatch):
    """A neighbour on the machine's other core makes 2 threads read as 1 did: that probe is not
    the machine's, so the next runs probe again (up to PROBE_TRIES) and keep each figure's best."""
    probes = iter([_two_counts(13.7, 14.0, step=0.004), _two_counts(24.9, 13.9, step=0.006)])
    runs: list[list[int]] = []

    def run(threads, notes, progress=None):
        runs.append(list(threads))
        return next(probes)

    monkeypatch.setattr(probe, "run_kernel_probe", run)
    first, _ = _kernels(measure=True)
    assert first is not None and not kern.scales(first)
    assert kern.rates_at(first, 2).rate("Q2_K", "expert") == 13.7
    second, _ = _kernels(measure=True)
    assert len(runs) == 2 and kern.scales(second)
    two, one = kern.rates_at(second, 2), kern.rates_at(second, 1)
    assert two.rate("Q2_K", "expert") == 24.9 and one.rate("Q2_K", "expert") == 14.0  # each the best
    assert two.step_seconds == 0.004  # the shorter step
    assert second.prompt.rate("Q2_K", "expert") == pytest.approx(24.9 * 1.5)
    assert _kernels(measure=True)[0] == second and len(runs) == 2  # it scales: read from the cache
    assert _kernels(measure=False)[0] == second


def test_a_probe_that_never_scales_is_taken_at_most_probe_tries_times(scripted_probe, monkeypatch):
    """A machine whose one thread already reads all its memory gives: no more probes after
    PROBE_TRIES, each start then reads the cache."""
    runs: list[int] = []

    def run(threads, notes, progress=None):
        runs.append(1)
        return _two_counts(10.0 + len(runs), 10.0)

    monkeypatch.setattr(probe, "run_kernel_probe", run)
    for _ in range(kern.PROBE_TRIES + 2):
        got, _ = _kernels(measure=True)
    assert len(runs) == kern.PROBE_TRIES
    assert kern.rates_at(got, 2).rate("Q2_K", "expert") == 10.0 + kern.PROBE_TRIES


def test_a_busy_run_does_not_take_a_probe_that_did_not_scale_again(scripted_probe, monkeypatch):
    """Beside a busy program a second probe would be slowed too: the cached one stands until a
    quiet run."""
    monkeypatch.setattr(probe, "run_kernel_probe", lambda *a, **k: (scripted_probe.append(1), _two_counts(13, 13))[1])
    _kernels(measure=True)
    got, _ = _kernels(measure=True, busy=1.0)
    assert got is not None and len(scripted_probe) == 1
