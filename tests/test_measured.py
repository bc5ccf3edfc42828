"""Measured speed feeds the ranking: `pocketchat bench` records it, --recommend uses it."""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys

from pocketchat.paths import settings
from pocketchat.select import catalog, fit, measured
from pocketchat.select.measured import Calibration, SpeedRecord
from pocketchat.select.profile import load_profile

from support import PROFILES


def test_measured_figure_for_the_build_and_calibrated_estimates_for_the_rest():
    profile = load_profile(PROFILES / "linux-32gb.json")
    key = measured.machine_key(profile)
    plain = fit.plan(profile, catalog.builds())
    q2 = next(c for c in plain.candidates if c.build.id == "POCKET-35B-Q2_K")
    iq1 = next(c for c in plain.candidates if c.build.id == "POCKET-35B-IQ1_M")
    # The Q2_K ran at half its estimate on this machine.
    arch, read = measured.kind_of(q2.build)
    rec = SpeedRecord("POCKET-35B-Q2_K", "cpu", q2.estimated_decode_tok_s / 2, q2.estimated_decode_tok_s, key,
                      arch=arch, read_bytes=read)
    speeds = Calibration.of([rec, SpeedRecord("other", "cpu", 1.0, 1.0, "another machine")], key)
    ranked = fit.plan(profile, catalog.builds(), speeds=speeds)
    q2m = next(c for c in ranked.candidates if c.build.id == "POCKET-35B-Q2_K")
    iq1m = next(c for c in ranked.candidates if c.build.id == "POCKET-35B-IQ1_M")
    assert q2m.speed_source == "measured" and "tok/s (measured)" in q2m.reason
    assert abs(q2m.estimated_decode_tok_s - q2.estimated_decode_tok_s / 2) < 1e-6
    assert iq1m.speed_source.startswith("estimate, calibrated")
    assert abs(iq1m.estimated_decode_tok_s - iq1.estimated_decode_tok_s / 2) < 1e-6
    assert iq1m.to_json()["speed_source"] == iq1m.speed_source


def test_runs_are_kept_up_to_five_per_model_and_a_damaged_file_is_no_records(tmp_path):
    for tok_s in (10.0, 12.0, 11.0, 30.0, 9.0, 10.5):
        measured.save(tmp_path, SpeedRecord("m", "cpu", tok_s, 20.0, "x", arch="a", read_bytes=1e9))
    measured.save(tmp_path, SpeedRecord("m", "gpu", 50.0, 40.0, "x"))
    got = measured.load(tmp_path)
    assert [r.measured_tok_s for r in got if r.placement == "cpu"] == [12.0, 11.0, 30.0, 9.0, 10.5]
    (tmp_path / measured.FILE_NAME).write_text("{broken")
    assert measured.load(tmp_path) == []


def _pocket(build_id: str):
    return next(b for b in catalog.builds() if b.id == build_id)


def test_one_noisy_run_among_several_moves_the_figure_little():
    q2 = _pocket("POCKET-35B-Q2_K")
    arch, read = measured.kind_of(q2)
    runs = [SpeedRecord(q2.id, "cpu", tok_s, 13.0, "x", arch=arch, read_bytes=read)
            for tok_s in (8.1, 7.9, 0.4, 8.3)]  # one run while the machine was busy
    speed, label = Calibration.of(runs, "x").speed(q2, "cpu", 13.0)
    assert 7.9 <= speed <= 8.3 and label == "measured, median of 4 runs"


def test_only_like_models_calibrate_an_estimate():
    """The starter (a 135M dense model) says nothing of POCKET; another POCKET build does."""
    q4, iq1 = _pocket("POCKET-35B-Q4_K_M"), _pocket("POCKET-35B-IQ1_M")
    starter = SpeedRecord("SmolLM2-135M-Instruct", "cpu", 0.8, 90.0, "x",  # one noisy run
                          arch="llama", read_bytes=98e6)
    arch, read = measured.kind_of(iq1)
    pocket = SpeedRecord(iq1.id, "cpu", 10.0, 20.0, "x", arch=arch, read_bytes=read)
    old = SpeedRecord("an old record", "cpu", 1.0, 10.0, "x")  # kept before the kind was
    alone = Calibration.of([starter, old], "x")
    assert alone.speed(q4, "cpu", 12.0) == (12.0, "estimate")
    speed, label = Calibration.of([starter, old, pocket], "x").speed(q4, "cpu", 12.0)
    assert speed == 6.0 and label == f"estimate, calibrated by 1 run of {iq1.id}"
    gpu = Calibration.of([pocket], "x").speed(q4, "gpu", 40.0)
    assert gpu == (40.0, "estimate")  # a CPU run does not calibrate a GPU plan


@pytest.mark.slow
def test_a_starter_bench_does_not_calibrate_pocket_and_forget_clears_it():
    env = dict(os.environ)
    run = lambda *a: subprocess.run([sys.executable, "-m", "pocketchat", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300, env=env)
    r = run("bench", "--model", "starter", "-p", "32", "-n", "8", "-r", "1", "--json")
    assert r.returncode == 0, r.stderr
    records = measured.load(settings().cache_dir)
    assert len(records) == 1 and records[0].model.startswith("SmolLM2") and records[0].measured_tok_s > 0
    r = run("--recommend", "--json")
    assert r.returncode == 0, r.stderr
    cands = json.loads(r.stdout)["candidates"]
    cpu = [c for c in cands if c["placement"] == "cpu"]
    assert cpu and all(c["speed_source"] == "estimate" for c in cpu)  # was ~0-1 tok/s "calibrated"
    r = run("bench", "--forget", "--model", "starter")
    assert r.returncode == 0 and "Forgot 1 measured speed" in r.stdout, r.stdout + r.stderr
    assert measured.load(settings().cache_dir) == []


def _between_machine():
    """A 2-core machine whose kernels (twice the compute-bound profile's) outrun its memory for
    Q2_K and Q3_K_M but not for IQ1_M: bandwidth-bound and compute-bound builds side by side."""
    from pocketchat.select.profile import profile_from_json

    data = json.loads((PROFILES / "linux-2core-compute-bound.json").read_text())
    data["memory_bandwidth_gbps"] = 14.0
    for entry in data["kernels"]["threads"].values():
        entry["rates"] = {t: {r: v * 2 for r, v in roles.items()} for t, roles in entry["rates"].items()}
    return profile_from_json(data)


def _record(profile, build_id: str, ratio: float) -> SpeedRecord:
    """A bench run of `build_id` that measured `ratio` times its estimate, with the estimate's parts."""
    build = _pocket(build_id)
    e = fit.estimate_speed(build, profile, "cpu", 2)
    arch, read = measured.kind_of(build)
    return SpeedRecord(build_id, "cpu", e.tok_s * ratio, e.tok_s, measured.machine_key(profile), n_threads=2,
                       arch=arch, read_bytes=read, memory_s=e.memory_s, compute_s=e.compute_s,
                       overhead_s=e.overhead_s)


def test_calibration_corrects_the_bound_a_run_hit_not_every_build_alike():
    """A bandwidth-bound Q2_K run 20% slower than estimated says the memory is slower than
    thought: the other bandwidth-bound build (Q3_K_M) slows down with it, the compute-bound
    IQ1_M (its kernels, not its bytes, are the limit) hardly moves; one common factor would
    have cut IQ1_M by 20% too. And the other way round."""
    profile = _between_machine()
    plain = {q: fit.estimate_speed(_pocket(f"POCKET-35B-{q}"), profile, "cpu", 2) for q in ("IQ1_M", "Q2_K", "Q3_K_M")}
    assert plain["Q2_K"].bound == plain["Q3_K_M"].bound == "bandwidth" and plain["IQ1_M"].bound == "compute"
    key = measured.machine_key(profile)

    def calibrated(records, quant):
        build = _pocket(f"POCKET-35B-{quant}")
        return Calibration.of(records, key).speed(build, "cpu", plain[quant])

    slow_memory = [_record(profile, "POCKET-35B-Q2_K", 0.8)]
    q3, label = calibrated(slow_memory, "Q3_K_M")
    assert q3 == pytest.approx(plain["Q3_K_M"].tok_s * 0.8, rel=0.05) and label.startswith("estimate, calibrated")
    iq1, _ = calibrated(slow_memory, "IQ1_M")
    assert iq1 > plain["IQ1_M"].tok_s * 0.95
    slow_kernels = [_record(profile, "POCKET-35B-IQ1_M", 0.8)]
    assert calibrated(slow_kernels, "Q2_K")[0] == pytest.approx(plain["Q2_K"].tok_s)
    assert calibrated(slow_kernels, "Q3_K_M")[0] == pytest.approx(plain["Q3_K_M"].tok_s)
    # the whole ranking, through fit.plan: IQ1_M's estimate is no longer cut by Q2_K's run
    ranked = fit.plan(profile, catalog.builds(), speeds=Calibration.of(slow_memory, key))
    by_id = {c.build.quant: c.estimated_decode_tok_s for c in ranked.candidates}
    assert by_id["Q2_K"] == pytest.approx(slow_memory[0].measured_tok_s)
    assert by_id["IQ1_M"] > plain["IQ1_M"].tok_s * 0.95


def test_a_record_without_the_estimates_parts_scales_by_one_factor():
    """Records written before the parts were kept (or with no kernels measured) still calibrate,
    by their median factor, as before."""
    profile = _between_machine()
    key = measured.machine_key(profile)
    old = _record(profile, "POCKET-35B-Q2_K", 0.8)
    old = SpeedRecord(**{**old.__dict__, "memory_s": 0.0, "compute_s": 0.0, "overhead_s": 0.0})
    iq1 = fit.estimate_speed(_pocket("POCKET-35B-IQ1_M"), profile, "cpu", 2)
    speed, _ = Calibration.of([old], key).speed(_pocket("POCKET-35B-IQ1_M"), "cpu", iq1)
    assert speed == pytest.approx(iq1.tok_s * 0.8)


def test_prompt_speeds_are_measured_for_the_build_and_calibrate_like_ones():
    """A bench's prompt speed is the build's own figure, and scales like builds' estimates by
    measured/estimated; a run that kept no prompt speed (a short prompt) calibrates nothing."""
    profile = load_profile(PROFILES / "linux-2core-amd-epyc.json")
    q2, iq1 = _pocket("POCKET-35B-Q2_K"), _pocket("POCKET-35B-IQ1_M")
    e_q2 = fit.estimate_prompt_speed(q2, profile, "cpu", 2)
    e_iq1 = fit.estimate_prompt_speed(iq1, profile, "cpu", 2)
    assert e_q2 and e_iq1 and fit.estimate_prompt_speed(q2, profile, "gpu", 2) is None
    key = measured.machine_key(profile)
    arch, read = measured.kind_of(q2)
    run = SpeedRecord(q2.id, "cpu", 10.0, 10.0, key, arch=arch, read_bytes=read,
                      measured_pp_tok_s=e_q2 * 0.8, estimated_pp_tok_s=e_q2)
    speeds = Calibration.of([run], key)
    assert speeds.prompt_speed(q2, "cpu", e_q2) == (pytest.approx(e_q2 * 0.8), "measured")
    figure, label = speeds.prompt_speed(iq1, "cpu", e_iq1)
    assert figure == pytest.approx(e_iq1 * 0.8) and label == f"estimate, calibrated by 1 run of {q2.id}"
    short = SpeedRecord(q2.id, "cpu", 10.0, 10.0, key, arch=arch, read_bytes=read)
    assert Calibration.of([short], key).prompt_speed(iq1, "cpu", e_iq1) == (e_iq1, "estimate")
    assert Calibration.of([short], key).prompt_speed(q2, "cpu", None) == (None, "estimate")
    rec = fit.plan(profile, catalog.builds(), speeds=speeds)
    shown = next(c for c in rec.candidates if c.build.id == iq1.id)
    assert shown.estimated_prompt_tok_s == pytest.approx(e_iq1 * 0.8)
    assert shown.to_json()["prompt_source"].startswith("estimate, calibrated")

