"""Faults of the environment are not "a bug in pocketchat": a stdout that cannot
encode the answer still gets all of it, a read-only home names the folder, a full disk gives
disk advice."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pocketchat import cli, paths

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

REPO = Path(__file__).resolve().parents[1]
TEXT = "café 日本語 ✓ and the rest of the answer"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **extra}
    return {k: v for k, v in env.items() if v is not None}


def _pocketchat(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pocketchat", *args], capture_output=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL, cwd=REPO)


# -- a stdout that cannot encode the text --------------------------------------------------


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])  # a Latin-1 locale; a Windows redirect
def test_a_saved_answer_is_printed_whole_to_a_stdout_that_cannot_encode_it(encoding):
    from pocketchat.conversations import Conversation

    c = Conversation()
    c.add("user", "question " + TEXT)
    c.add("assistant", "answer " + TEXT)
    c.save()
    done = _pocketchat(["history", "--show", c.id], _env(PYTHONIOENCODING=encoding))
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode(encoding)
    assert "answer café ??? ? and the rest of the answer" in out, out
    assert b"This is a bug" not in done.stderr
    done = _pocketchat(["history"], _env(PYTHONIOENCODING=encoding))
    assert done.returncode == 0 and "question café ???" in done.stdout.decode(encoding)


def test_a_one_shot_answer_is_printed_whole_to_a_latin1_stdout(monkeypatch):
    """The engine is scripted (its words must be known); the stdout is a real Latin-1 stream."""
    from support.scripted_engine import Reply, ScriptedEngine
    import pocketchat.engines as engines

    monkeypatch.setattr(engines, "open_engine", lambda *a, **k: ScriptedEngine([Reply(TEXT)]))
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="latin-1", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert cli.main(["--model", "starter", "-p", "question"]) == 0
    assert raw.getvalue().decode("latin-1") == "café ??? ? and the rest of the answer\n"


# -- a read-only home ----------------------------------------------------------------------


def _home_env(home: Path) -> dict[str, str]:
    """Every folder pocketchat writes in its default place under `home`."""
    env = _env(HOME=str(home))
    for var in ("POCKETCHAT_DATA_DIR", "POCKETCHAT_CACHE_DIR", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                "HF_HOME", "HF_HUB_CACHE"):
        env.pop(var, None)
    return env


BENCH = ["bench", "--model", "starter", "-p", "16", "-n", "4", "-r", "1", "--in-process"]


def _figures(done: subprocess.CompletedProcess) -> list[str]:
    """The rows of bench's table on stdout (pp16 and tg4)."""
    return [ln for ln in done.stdout.decode().splitlines() if "| pp16 " in ln or "| tg4 " in ln]


def test_bench_in_a_read_only_home_prints_its_figures_and_names_the_folder(tmp_path):
    """The figures were thrown away when the cache could not be written; now they are
    printed, and a warning says what was not saved, where, and what to do."""
    from support.readonly import read_only
    home = tmp_path / "home"
    with read_only(home):
        done = _pocketchat(BENCH, _home_env(home))
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert len(_figures(done)) == 2, done.stdout.decode()
    assert "This is a bug" not in err and "Traceback" not in err
    assert f"warning: the measured speed was not saved to {home} (Read-only file system)" in err, err
    assert f"make {home} writable or set POCKETCHAT_CACHE_DIR" in err.splitlines()[-1], err


def test_bench_forget_in_a_read_only_cache_names_the_folder(tmp_path):
    """What cannot be done at all (forgetting needs a write) stays an error naming the folder."""
    from support.readonly import read_only
    from pocketchat.select import measured

    cache = tmp_path / "cache"
    measured.save(cache, measured.SpeedRecord(model="m", placement="cpu", measured_tok_s=1.0,
                                              estimated_tok_s=1.0, machine="x"))
    with read_only(cache):
        done = _pocketchat(["bench", "--forget"], _env(POCKETCHAT_CACHE_DIR=str(cache)))
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "This is a bug" not in err and "Traceback" not in err
    assert f"error: cannot write to the folder {cache}: " in err, err
    assert "POCKETCHAT_CACHE_DIR" in err.splitlines()[-1], err  # what to set instead


@contextlib.contextmanager
def full_disk(folder: Path):
    """`folder` on a tiny tmpfs filled to the last byte (root only), or skip."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                          capture_output=True, timeout=10)
    if done.returncode != 0:
        pytest.skip("cannot mount a small file system here")
    try:
        fd = os.open(folder / f"filler-{uuid.uuid4().hex[:6]}", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.close(fd)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=10)


def test_bench_on_a_full_disk_prints_its_figures_and_gives_disk_advice(tmp_path):
    with full_disk(tmp_path / "cache") as cache:
        done = _pocketchat(BENCH, _env(POCKETCHAT_CACHE_DIR=str(cache)))
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert len(_figures(done)) == 2, done.stdout.decode()
    assert "This is a bug" not in err and "Traceback" not in err
    assert f"warning: the measured speed was not saved to {cache} (No space left on device)" in err, err
    assert f"free some space on the disk of {cache}" in err and "POCKETCHAT_CACHE_DIR" in err, err
    assert "RAM" not in err and "Close other programs" not in err


def test_a_disk_too_small_for_any_build_gives_disk_advice_not_ram_advice(tmp_path, capsys):
    import json

    profile = json.loads((REPO / "tests/profiles/linux-32gb-disk-nearly-full.json").read_text())
    profile["disk_free_bytes"] = 2_000_000_000  # less than the smallest build
    path = tmp_path / "small-disk.json"
    path.write_text(json.dumps(profile))
    for args in (["-p", "hi"], ["download"], ["--recommend"]):
        paths.reset()
        assert cli.main([*args, "--hardware", str(path)]) == 1, args
        err = capsys.readouterr().err
        assert "not enough free disk to download" in err and "2.0 GB free" in err, (args, err)
        assert "Free disk space where models are stored" in err and "HF_HUB_CACHE" in err, err
        assert "Close other programs" not in err and "smaller --ctx" not in err, err


def test_the_chat_on_a_full_disk_says_so_in_one_line_and_exits_1(tmp_path):
    """The chat in a real terminal (tmux) whose data folder's disk is full: no traceback, one
    line naming the folder and the space left, exit 1 (the lock of the new chat cannot be
    written, and nothing of the chat could be saved)."""
    pytest.importorskip("llama_cpp")
    from support.terminal import Tmux, command, wait_file

    with full_disk(tmp_path / "data") as data:
        line, exit_file = command(tmp_path, "--model starter --no-think 2> "
                                  + str(tmp_path / "err.txt"),
                                  {"POCKETCHAT_DATA_DIR": str(data),
                                   "POCKETCHAT_CACHE_DIR": str(tmp_path / "cache")})
        tmux = Tmux()
        try:
            tmux("new-session", "-d", "-s", "e2e", "-x", "100", "-y", "30", line)
            assert wait_file(exit_file, 90), tmux.screen()
        finally:
            tmux.kill()
    err = (tmp_path / "err.txt").read_text()
    assert exit_file.read_text().strip() == "1", err
    assert "Traceback" not in err and "This is a bug" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[0].startswith(f"error: cannot write to {data}") and " free)" in lines[0], err
    assert "No space left on device" in lines[0] and "POCKETCHAT_DATA_DIR" in err, err
