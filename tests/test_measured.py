"""Measured speed feeds the ranking: `pocketchat bench` records it, --recommend uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pocketchat.paths import settings
from pocketchat.select import catalog, fit, measured
from pocketchat.select.measured import Calibration, SpeedRecord
from pocketchat.select.profile import load_profile

from conftest import PROFILES


def test_measured_figure_for_the_build_and_calibrated_estimates_for_the_rest():
    profile = load_profile(PROFILES / "linux-32gb.json")
    key = measured.machine_key(profile)
    plain = fit.plan(profile, catalog.builds())
    q2 = next(c for c in plain.candidates if c.build.id == "POCKET-35B-Q2_K")
    iq1 = next(c for c in plain.candidates if c.build.id == "POCKET-35B-IQ1_M")
    # The Q2_K ran at half its estimate on this machine.
    rec = SpeedRecord("POCKET-35B-Q2_K", "cpu", q2.estimated_decode_tok_s / 2, q2.estimated_decode_tok_s, key)
    speeds = Calibration.of([rec, SpeedRecord("other", "cpu", 1.0, 1.0, "another machine")], key)
    ranked = fit.plan(profile, catalog.builds(), speeds=speeds)
    q2m = next(c for c in ranked.candidates if c.build.id == "POCKET-35B-Q2_K")
    iq1m = next(c for c in ranked.candidates if c.build.id == "POCKET-35B-IQ1_M")
    assert q2m.speed_source == "measured" and "tok/s (measured)" in q2m.reason
    assert abs(q2m.estimated_decode_tok_s - q2.estimated_decode_tok_s / 2) < 1e-6
    assert iq1m.speed_source.startswith("estimate, calibrated")
    assert abs(iq1m.estimated_decode_tok_s - iq1.estimated_decode_tok_s / 2) < 1e-6
    assert iq1m.to_json()["speed_source"] == iq1m.speed_source


def test_records_survive_a_round_trip_and_replace_the_same_run(tmp_path):
    a = SpeedRecord("m", "cpu", 10.0, 20.0, "x")
    measured.save(tmp_path, a)
    measured.save(tmp_path, SpeedRecord("m", "cpu", 12.0, 20.0, "x"))
    measured.save(tmp_path, SpeedRecord("m", "gpu", 50.0, 40.0, "x"))
    got = measured.load(tmp_path)
    assert [(r.placement, r.measured_tok_s) for r in got] == [("cpu", 12.0), ("gpu", 50.0)]
    cal = Calibration.of(got, "x")
    assert cal.factors == {"cpu": 0.6, "gpu": 1.25}
    (tmp_path / measured.FILE_NAME).write_text("{broken")
    assert measured.load(tmp_path) == []


def test_bench_then_recommend_uses_the_measured_run():
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
    assert cpu and all(c["speed_source"] == "estimate, calibrated by a measured run" for c in cpu)
