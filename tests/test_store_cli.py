"""`pocketchat download` and `pocketchat models` through the real CLI entry point."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from support.hubserver import blob

from pocketchat.cli import main
from pocketchat.store import cache, api as store
from pocketchat.select import catalog

REPO = "tester/Cli-GGUF"
PROFILES = Path(__file__).parent / "profiles"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def repo(hub):
    data = blob(800_000, 70)
    hub.add_repo(REPO, {"Cli-Q4_K_M.gguf": data, "Cli-Q8_0.gguf": blob(1000, 71)})
    return data


def test_download_with_yes_prints_the_path_and_progress(hub, repo, capsys):
    hub.faults.stall_after, hub.faults.stall_s = 300_000, 4.0
    assert main(["download", f"{REPO}:Q4_K_M", "--yes", "--stall-timeout", "0.5"]) == 0
    out, err = capsys.readouterr()
    path = Path(out.strip())
    assert path.read_bytes() == repo
    assert "downloading" in err and "100.0%" in err and "800.0 kB" in err
    assert "stalled: no data for 0.5 s; retrying" in err


def test_download_without_a_terminal_and_without_yes_fails_clearly(hub, repo, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["download", f"{REPO}:Q4_K_M"]) == 1
    _out, err = capsys.readouterr()
    assert "--yes" in err and "Traceback" not in err
    assert hub.bytes_served == 0


@pytest.mark.parametrize("answer", ["n\n", "y\n"])
def test_download_asks_on_a_terminal(hub, repo, capsys, monkeypatch, answer):
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    assert main(["download", f"{REPO}:Q4_K_M"]) == 0  # saying no is a choice, not an error
    _out, err = capsys.readouterr()
    assert f"Download {REPO}:Q4_K_M (800.0 kB) to " in err and "free disk after:" in err and "[y/N]" in err
    if answer == "n\n":
        assert "nothing was downloaded" in err and "error" not in err and hub.bytes_served == 0
    else:
        assert hub.bytes_served == len(repo)


def test_download_errors_are_one_message(hub, repo, capsys):
    assert main(["download", "nobody/Missing-GGUF:Q4_K_M", "--yes"]) == 1
    _out, err = capsys.readouterr()
    assert err.startswith("error: no model repository nobody/Missing-GGUF") and "Traceback" not in err
    assert main(["download", f"{REPO}:Q5_K_M", "--yes"]) == 1
    assert "Cli-Q4_K_M.gguf" in capsys.readouterr().err
    assert main(["download", f"{REPO}:Q4_K_M", "--offline"]) == 1
    err = capsys.readouterr().err
    assert "offline" in err and "not on disk" in err


def test_download_without_spec_fetches_the_recommended_build(hub, capsys):
    from pocketchat.choose.model import recommend
    from pocketchat.choose.selection import Selection

    profile = str(PROFILES / "linux-32gb.json")
    build = recommend(Selection(hardware=Path(profile))).recommended.build  # whatever the ranking picks for this machine
    data = blob(500_000, 80)
    hub.add_repo(build.repo_id, {build.filename: data})
    assert main(["download", "--hardware", profile, "--yes"]) == 0
    out, err = capsys.readouterr()
    assert f"recommended for this machine: {build.id}" in err
    assert Path(out.strip()).read_bytes() == data
    assert store.downloaded_build_ids() == {build.id}


def test_models_lists_and_removes(hub, repo, capsys):
    assert main(["models"]) == 0
    assert "No models on disk yet" in capsys.readouterr().out
    build = catalog.get("POCKET-35B-IQ1_M")
    hub.add_repo(build.repo_id, {build.filename: blob(300_000, 90)})
    assert main(["download", build.id, "--yes"]) == 0
    assert main(["download", f"{REPO}/Cli-Q8_0.gguf", "--yes"]) == 0
    capsys.readouterr()
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "SIZE", "CHECKSUM"]
    row = next(line for line in lines if line.startswith(build.id))
    assert "300.0 kB" in row and "verified" in row and str(cache.repo_dir(build.repo_id)) in row
    assert any(line.startswith(f"{REPO}/Cli-Q8_0.gguf") for line in lines)
    assert main(["models", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {m["name"] for m in listing["models"]} == {build.id, f"{REPO}/Cli-Q8_0.gguf"}
    assert main(["models", "rm", build.id]) == 0
    assert "removed POCKET-35B-IQ1_M" in capsys.readouterr().out
    assert [m.name for m in store.list_models()] == [f"{REPO}/Cli-Q8_0.gguf"]
    assert main(["models", "rm", build.id]) == 1
    err = capsys.readouterr().err
    assert f"no model '{build.id}' on disk" in err and "Cli-Q8_0.gguf" in err
