"""Polish: plurals, one error style, one unit per line, build ids in hints, table width,
the bandwidth footer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pocketchat import cli
from pocketchat.commands.download import TerminalProgress
from pocketchat.select.profile import load_profile
from pocketchat.select.report import format_profile
from pocketchat.store.types import DownloadProgress
from pocketchat.types import LoadPlan

PROFILES = sorted((Path(__file__).parent / "profiles").glob("*.json"))


def test_one_is_singular():
    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048, n_threads=1,
                    n_threads_batch=1)
    assert plan.describe() == "CPU, 1 thread"
    profile = load_profile(Path(__file__).parent / "profiles" / "board-4gb.json")
    one = type(profile)(**{**profile.__dict__, "cpu_physical_cores": 1, "cpu_logical_cores": 1})
    assert "(1 core, 1 thread)" in format_profile(one)


def test_history_says_1_prompt(capsys):
    from pocketchat.conversations import Conversation

    c = Conversation()
    c.add("user", "only one")
    c.save()
    assert cli.main(["history"]) == 0
    out = capsys.readouterr().out
    assert "  1 prompt " in out and "1 prompts" not in out


def test_argument_errors_have_the_same_error_style(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--ctx", "abc"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "\nerror: argument --ctx: invalid int value: 'abc'\n" in err and "pocketchat: error" not in err


def test_a_download_line_uses_one_unit():
    p = DownloadProgress("POCKET-35B-Q2_K", "x.gguf", "downloading", 512_000_000, 12_900_000_000, 0.0, None, 1, 1)
    assert "0.51 GB / 12.90 GB" in TerminalProgress.format(p)


def test_models_suggests_the_build_id_for_a_partial_download(capsys):
    from pocketchat.select import catalog
    from pocketchat.store import cache, inventory

    build = next(b for b in catalog.builds() if b.format == "gguf" and b.filename)
    etag = "a" * 64
    part = cache.partial_path(build.repo_id, etag)
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_bytes(b"\0" * 1000)
    inventory.note_partial(build.repo_id, etag, build.filename, build.size_bytes)
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert f"`pocketchat download {build.id}` resumes it" in out


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_recommend_rows_stay_within_120_columns(profile, capsys):
    cli.main(["--recommend", "--hardware", str(profile)])
    out = capsys.readouterr().out
    too_wide = [line for line in out.splitlines() if len(line) > 120 and not line.startswith("  or with")]
    assert not too_wide, "\n".join(too_wide)


def test_the_bandwidth_footer_says_default_when_nothing_was_measured(tmp_path, capsys):
    data = {"os": "linux", "arch": "x86_64", "ram_total_bytes": 32 * 2**30}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    cli.main(["--recommend", "--hardware", str(path)])
    out = capsys.readouterr().out
    assert "the default 20 GB/s memory bandwidth (not measured)" in out and "measured bandwidth" not in out
    path.write_text(json.dumps({**data, "memory_bandwidth_gbps": 55.5}))
    cli.main(["--recommend", "--hardware", str(path)])
    assert "55.5 GB/s memory bandwidth; kernel speeds not measured)" in capsys.readouterr().out
