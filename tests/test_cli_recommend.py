"""`pocketchat --probe` / `--recommend` end to end through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import PROFILES


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pocketchat", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_recommend_for_a_replayed_mini_pc():
    r = cli("--recommend", "--hardware", str(PROFILES / "linux-16gb.json"))
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("Recommended: POCKET-35B-IQ1_M")
    assert "pocketchat --model POCKET-35B-IQ1_M" in r.stdout
    # every catalog build has a row in the table
    for build in ("POCKET-35B-Q4_K_M", "POCKET-35B-Q2_K", "POCKET-KR-MLX", "POCKET-EN-PC-mix"):
        assert build in r.stdout


def test_recommend_json_has_the_documented_fields():
    r = cli("--recommend", "--json", "--hardware", str(PROFILES / "linux-12gb-nvidia-32gb.json"))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"hardware", "recommended", "candidates"}
    rec = data["recommended"]
    for key in ("build", "repo_id", "filename", "quant", "format", "backend", "size_bytes",
                "placement", "n_gpu_layers", "n_ctx", "n_threads", "estimated_memory_bytes",
                "estimated_decode_tok_s", "fits", "reason"):
        assert key in rec
    assert (rec["build"], rec["placement"], rec["n_gpu_layers"]) == ("POCKET-35B-Q4_K_M", "gpu+cpu-experts", -1)
    assert len(data["candidates"]) == 9


def test_korean_on_an_m3_pro_gets_the_mlx_build():
    r = cli("--recommend", "--json", "--lang", "ko", "--hardware", str(PROFILES / "mac-m3pro-18gb.json"))
    rec = json.loads(r.stdout)["recommended"]
    assert (rec["build"], rec["backend"], rec["format"]) == ("POCKET-KR-MLX", "mlx", "mlx")


def test_nothing_fits_exits_1_with_the_figures():
    r = cli("--recommend", "--hardware", str(PROFILES / "board-4gb.json"))
    assert r.returncode == 1
    assert "Nothing fits" in r.stdout
    err = r.stderr.strip().splitlines()
    assert err[0].startswith("error: ") and "free" in err[0] and "smallest build" in err[0]
    assert "Traceback" not in r.stderr


def test_nothing_fits_json_still_prints_json_and_exits_1():
    r = cli("--recommend", "--json", "--hardware", str(PROFILES / "board-4gb.json"))
    assert r.returncode == 1 and json.loads(r.stdout)["recommended"] is None


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--recommend", "--lang", "fr"], "unknown --lang 'fr'"),
        (["--recommend", "--ctx", "9999999"], "at 9999999 context"),
        (["--recommend", "--hardware", "/nonexistent.json"], "cannot read hardware profile"),
    ],
)
def test_bad_input_is_one_clear_message(args, needle):
    if "--hardware" not in args:
        args = [*args, "--hardware", str(PROFILES / "linux-16gb.json")]
    r = cli(*args)
    assert r.returncode == 1
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_unknown_key_in_profile_names_the_key(tmp_path):
    data = json.loads((PROFILES / "linux-16gb.json").read_text())
    data["gpu_count"] = 2
    f = tmp_path / "hw.json"
    f.write_text(json.dumps(data))
    r = cli("--recommend", "--hardware", str(f))
    assert r.returncode == 1 and "unknown key 'gpu_count'" in r.stderr


def test_probe_json_replays_to_the_same_recommendation(tmp_path):
    probe = cli("--probe", "--json")
    assert probe.returncode == 0, probe.stderr
    hw = json.loads(probe.stdout)
    assert hw["ram_total_bytes"] > 0 and hw["cpu_logical_cores"] >= 1
    f = tmp_path / "me.json"
    f.write_text(probe.stdout)
    replay = cli("--recommend", "--json", "--hardware", str(f))
    assert replay.returncode in (0, 1)
    assert json.loads(replay.stdout)["hardware"] == hw


def test_probe_text_names_ram_and_cpu():
    r = cli("--probe")
    assert r.returncode == 0 and "RAM:" in r.stdout and "CPU:" in r.stdout


@pytest.mark.parametrize("replay", [True, False], ids=["replayed", "this-machine"])
def test_recommend_imports_no_backend_and_no_textual(replay):
    args = ["--recommend", "--json"] + (["--hardware", str(PROFILES / "linux-16gb.json")] if replay else [])
    code = (
        "import sys\n"
        "from pocketchat.cli import main\n"
        f"rc = main({args!r})\n"
        "heavy = [m for m in ('llama_cpp', 'mlx', 'mlx_lm', 'textual', 'huggingface_hub') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr


def test_a_context_no_build_holds_says_the_need_once():
    r = cli("--recommend", "--ctx", "10000000", "--hardware", str(PROFILES / "linux-32gb.json"))
    assert r.returncode == 1
    err = r.stderr.splitlines()[0]
    assert err.count("GB at 10000000 context") == 1 and err.count("292.") == 1, err


def test_a_backend_that_rules_out_every_build_says_so_not_fits():
    r = cli("--backend", "mlx", "--recommend", "--hardware", str(PROFILES / "linux-32gb.json"))
    assert r.returncode == 1
    err = r.stderr
    assert "no build can run with these settings: needs the llama.cpp backend" in err
    assert "fits:" not in err and "Close other programs" not in err
    assert "--backend" in err.splitlines()[1]
