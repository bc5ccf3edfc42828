"""`pocketchat bench` through the real CLI: llama.cpp on the starter model and MLX on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pocketchat", "bench", *args, "--json"],
                          capture_output=True, text=True, timeout=300)


def check(r: subprocess.CompletedProcess, n_prompt: int, n_gen: int) -> dict:
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    by_test = {x["test"]: x for x in data["results"]}
    assert set(by_test) == {f"pp{n_prompt}", f"tg{n_gen}"}
    for x in by_test.values():
        assert x["tok_s"] > 0 and all(run > 0 for run in x["runs"])
    assert by_test[f"tg{n_gen}"]["tokens"] == n_gen
    assert data["size_bytes"] > 0 and data["worker"] is True
    return data


def test_bench_starter_through_the_worker():
    data = check(bench("--model", "starter", "-p", "64", "-n", "16", "-r", "2"), 64, 16)
    assert data["backend"] == "llama.cpp" and data["placement"] == "cpu"
    assert data["n_threads"] >= 1


def test_bench_mlx_folder(tmp_path):
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_llama
    folder = write_tiny_llama(tmp_path / "tiny-mlx")
    data = check(bench("--model", str(folder), "--backend", "mlx", "-p", "32", "-n", "8", "-r", "1"), 32, 8)
    assert data["backend"] == "mlx"


def test_bench_missing_model_is_one_message(tmp_path):
    r = bench("--model", str(tmp_path / "nope.gguf"))
    assert r.returncode == 1 and "no model file" in r.stderr and "Traceback" not in r.stderr


def test_bench_default_prompt_fits_a_small_mlx_context(tmp_path):
    """pp512 on a model whose tokenizer makes many tokens per word, in a 1,024-token context."""
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_llama
    folder = write_tiny_llama(tmp_path / "tiny-mlx")
    data = check(bench("--model", str(folder), "--backend", "mlx", "--ctx", "1024", "-n", "8",
                       "-r", "1"), 512, 8)
    pp = next(x for x in data["results"] if x["test"] == "pp512")
    assert 400 <= pp["tokens"] <= 1024


@pytest.mark.parametrize("thinking", ["on", "off"])
def test_bench_turns_rows_show_the_reuse(tmp_path, thinking):
    from support.tinyqwen35 import QWEN35_TEMPLATE, write_tiny_qwen35moe
    model = write_tiny_qwen35moe(tmp_path / "tiny-qwen35moe.gguf", chat_template=QWEN35_TEMPLATE)
    r = bench("--model", str(model), "--turns", "3", "--thinking", thinking, "--threads", "1")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    rows = data["results"]
    assert [x["test"] for x in rows] == ["turn1", "turn2", "turn3"]
    assert data["thinking"] == thinking and data["worker"] is True
    for x in rows:
        assert x["prompt_tokens"] == x["reused_tokens"] + x["evaluated_tokens"]
        assert x["ttft_s"] > 0
    for before, x in zip(rows, rows[1:], strict=False):  # from turn 2: the new message and a little more
        assert x["evaluated_tokens"] <= x["prompt_tokens"] - before["prompt_tokens"] + 16
        assert x["reused_tokens"] >= before["prompt_tokens"] - 16


@pytest.mark.parametrize("thinking", ["off", "on"])
def test_bench_turns_preserve_thinking_extends_the_state(tmp_path, thinking):
    """Qwen3.6's preserve_thinking: every earlier turn keeps its reasoning (an empty think block
    with thinking off), so from turn 2 the prompt extends what the model's state held after the
    previous answer: all of it is kept, only the template's boundary and the new message are
    evaluated. Without it the history drops the think block and the state diverges there."""
    from support.tinyqwen35 import QWEN36_TEMPLATE, write_tiny_qwen35moe
    model = write_tiny_qwen35moe(tmp_path / "tiny-qwen36.gguf", chat_template=QWEN36_TEMPLATE,
                                 ascii_only=True)
    r = bench("--model", str(model), "--turns", "3", "--thinking", thinking, "--threads", "1",
              "--preserve-thinking")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    without, with_ = data["results"], data["results_preserve_thinking"]
    assert [x["test"] for x in with_] == [x["test"] for x in without] == ["turn1", "turn2", "turn3"]
    boundary = 20  # "\n</think>\n\n" (bytes here), end of turn, the next user header
    for before, x, plain in zip(with_, with_[1:], without[1:], strict=False):
        kept = x["reused_tokens"] - x["prepared_tokens"]
        assert kept > before["prompt_tokens"]  # the previous prompt and answer, all kept
        assert x["prepared_tokens"] <= boundary
        assert kept > plain["reused_tokens"] - plain["prepared_tokens"]
        new_message = x["prompt_tokens"] - x["reused_tokens"]
        assert x["evaluated_tokens"] == new_message
        # without: the answer is evaluated again (thinking off: the tiny model's answers have no
        # reasoning), or (on: they are all reasoning, cut at the cap) thrown away, which saves
        # no work either: the same boundary is evaluated
        work, plain_work = (x["prepared_tokens"] + x["evaluated_tokens"],
                            plain["prepared_tokens"] + plain["evaluated_tokens"])
        assert plain_work > work if thinking == "off" else plain_work >= work


def test_bench_template_kwarg_needs_turns():
    r = bench("--model", "starter", "--template-kwarg", "preserve_thinking=true")
    assert r.returncode != 0 and "--turns" in r.stderr


def test_bench_keeps_the_prompt_speed_and_inspect_tells_it(tmp_path):
    """A bench run that reads enough prompt tokens (MIN_PROMPT_RECORDED; the template's reused
    head is not read again) is kept, prompt speed too (the conftest's cache is per test), and
    `inspect` then tells both speeds as measured on this machine."""
    import os
    from pathlib import Path

    data = check(bench("--model", "starter", "-p", "400", "-n", "8", "-r", "1"), 400, 8)
    pp = next(x["tok_s"] for x in data["results"] if x["test"] == "pp400")
    records = json.loads((Path(os.environ["POCKETCHAT_CACHE_DIR"]) / "bench-speeds.json").read_text())
    (kept,) = records["records"]
    assert kept["measured_pp_tok_s"] == pytest.approx(pp, rel=0.01) and kept["measured_tok_s"] > 0
    r = subprocess.run([sys.executable, "-m", "pocketchat", "inspect", "starter", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    speed = json.loads(r.stdout)["speed"]
    assert speed["source"] == "measured" and speed["prompt_source"] == "measured"
    assert speed["prompt_tok_s"] == pytest.approx(pp, rel=0.01)
    r = subprocess.run([sys.executable, "-m", "pocketchat", "inspect", "starter"],
                       capture_output=True, text=True, timeout=300)
    line = next(x for x in r.stdout.splitlines() if "speed here:" in x)
    assert "(measured)" in line and f"reads about {pp:.0f} prompt tokens/s" in line, line


def test_bench_short_prompt_keeps_no_prompt_speed():
    """pp of a short prompt is not what a document reads at: only the decode speed is kept."""
    import os
    from pathlib import Path

    check(bench("--model", "starter", "-p", "32", "-n", "8", "-r", "1"), 32, 8)
    records = json.loads((Path(os.environ["POCKETCHAT_CACHE_DIR"]) / "bench-speeds.json").read_text())
    (kept,) = records["records"]
    assert kept["measured_tok_s"] > 0 and kept["measured_pp_tok_s"] == 0
