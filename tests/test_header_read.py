"""The header read before a download (HTTP Range) is retried and resumed like the
body, honours --stall-timeout, and a file the server sends altered is not "models rm"."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketchat.cli import main
from pocketchat.store import cache

REPO = "tester/Smol-GGUF"
SPEC = f"{REPO}:Q4_1"
FIRST = "bytes=0-1048575"


@pytest.fixture
def smol(hub):
    from pocketchat.store.starter import starter_path

    hub.add_repo(REPO, {"Smol-Q4_1.gguf": starter_path()})
    hub.reset_counters()
    return hub


def header_ranges(server) -> list[str]:
    """The Range of each GET for the file before the whole-file download began."""
    ranges = [h.get("Range") for verb, path, h in server.requests if verb == "GET" and "/resolve/" in path]
    return [r for r in ranges if r and r.endswith("-1048575")]


def _downloaded(capsys) -> Path:
    from pocketchat.store.starter import starter_path

    path = Path(capsys.readouterr().out.strip())
    assert path.stat().st_size == starter_path().stat().st_size
    return path


@pytest.mark.slow
def test_a_dropped_header_read_resumes_where_it_stopped(smol, capsys):
    smol.faults.drop_after = 300_000  # the first GET (the header read) is cut after 300 kB
    assert main(["download", SPEC, "--yes"]) == 0, capsys.readouterr().err
    _downloaded(capsys)
    ranges = header_ranges(smol)
    assert ranges[0] == FIRST and ranges[1] == "bytes=300000-1048575", ranges


@pytest.mark.slow
def test_the_header_read_is_retried_after_503s(smol, capsys):
    smol.faults.fail_503 = 2
    assert main(["download", SPEC, "--yes"]) == 0, capsys.readouterr().err
    _downloaded(capsys)
    assert header_ranges(smol)[:3] == [FIRST] * 3


@pytest.mark.slow
def test_a_stalled_header_read_reconnects_after_the_stall_timeout(smol, capsys):
    smol.faults.stall_after, smol.faults.stall_s = 100_000, 60.0  # longer than the old fixed 30 s
    assert main(["download", SPEC, "--yes", "--stall-timeout", "1"]) == 0, capsys.readouterr().err
    _downloaded(capsys)
    ranges = header_ranges(smol)
    assert len(ranges) == 2 and ranges[0] == FIRST, ranges
    resumed_at = int(ranges[1].split("=")[1].split("-")[0])
    assert 0 < resumed_at <= 100_000, ranges


def test_a_file_the_server_alters_is_not_models_rm(smol, capsys):
    smol.faults.corrupt = True  # every byte flipped on the way, as a broken proxy might
    assert main(["download", SPEC, "--yes"]) == 1
    err = capsys.readouterr().err
    assert "is not a GGUF file as the server sends it" in err, err
    assert "models rm" not in err and "Nothing was downloaded" in err, err
    assert "the server or a proxy on the way may be altering the file" in err, err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert smol.bytes_served <= 1024 * 1024
    assert not list(cache.repo_dir(REPO).rglob("*.incomplete"))
