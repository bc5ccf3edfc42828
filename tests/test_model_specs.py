"""Every kind of model spec works the same in every command: one classifier, one choose path.

The real CLI (a subprocess) against the local Hub test server (tests/support/hubserver.py): `--model
REPO/FILE.gguf` after `pocketchat download REPO/FILE.gguf` (it used to be taken for a missing
local file), `REPO:QUANT` fetched on first use, a local path with a space and non-ASCII
characters, and `starter` (which `inspect` used to refuse), each through `-p`, `bench` and
`inspect`. The served model is the starter's GGUF, so the answers are real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.hubserver import HubFile, HubServer
from pocketchat.errors import ModelNotFound
from pocketchat.store.spec import parse_spec

pytestmark = pytest.mark.slow

REPO = "tester/Smol-GGUF"
FILE_SPEC = f"{REPO}/Smol-Q8_0.gguf"
QUANT_SPEC = f"{REPO}:Q4_1"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A Hub serving the starter GGUF under two names, and the directories every run shares."""
    from pocketchat.store.starter import starter_path

    root = tmp_path_factory.mktemp("specs")
    local = root / "my models" / "스몰 모델 é.gguf"
    local.parent.mkdir()
    shutil.copyfile(starter_path(), local)
    with HubServer() as hub:
        hub.add_repo(REPO, {"Smol-Q4_1.gguf": HubFile("Smol-Q4_1.gguf", source=starter_path()),
                            "Smol-Q8_0.gguf": HubFile("Smol-Q8_0.gguf", source=starter_path())})
        env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HOME=str(root / "hf"),
                   HF_HUB_CACHE=str(root / "hf" / "hub"), POCKETCHAT_DATA_DIR=str(root / "data"),
                   POCKETCHAT_CACHE_DIR=str(root / "cache"))
        yield {"env": env, "local": local, "cwd": root, "hub": hub}


def cli(world, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "pocketchat", *args], capture_output=True, text=True,
                       timeout=timeout, env=world["env"], cwd=world["cwd"], stdin=subprocess.DEVNULL)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def check_every_command(world, spec: str) -> None:
    """-p answers, bench measures, inspect reads the header and plans it on this machine."""
    r = cli(world, "--model", spec, "--yes", "-p", "Say hello in three words.")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no answer"
    r = cli(world, "bench", "--model", spec, "--yes", "-p", "16", "-n", "4", "-r", "1", "--json")
    assert r.returncode == 0, r.stderr
    tests = {t["test"]: t["tok_s"] for t in json.loads(r.stdout)["results"]}
    assert tests["pp16"] > 0 and tests["tg4"] > 0
    r = cli(world, "inspect", spec)
    assert r.returncode == 0, r.stderr
    assert "architecture: llama; runtime can load it: yes" in r.stdout
    assert "on this machine: fits: CPU" in r.stdout


def test_repo_file_after_download(world):
    r = cli(world, "download", FILE_SPEC, "--yes")
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.name == "Smol-Q8_0.gguf" and path.is_file()
    served = world["hub"].bytes_served
    check_every_command(world, FILE_SPEC)
    assert world["hub"].bytes_served == served  # used from disk: nothing fetched again


def test_repo_quant_fetched_on_first_use(world):
    check_every_command(world, QUANT_SPEC)


def test_local_path_with_a_space_and_non_ascii(world):
    check_every_command(world, str(world["local"]))
    r = cli(world, "inspect", str(world["local"]))
    assert "스몰 모델 é.gguf" in r.stdout


def test_starter(world):
    check_every_command(world, "starter")
    r = cli(world, "inspect", "starter")
    assert r.stdout.startswith("SmolLM2-135M-Instruct (starter)  (")  # as the chat names it


@pytest.mark.parametrize("text,kind", [
    ("starter", "starter"),
    ("POCKET-35B-Q2_K", "build"),
    ("pocket-35b-q2_k", "build"),
    (QUANT_SPEC, "quant"),
    (FILE_SPEC, "file"),
    (REPO, "repo"),
])
def test_the_one_classifier(text, kind):
    spec = parse_spec(text)
    assert spec.kind == kind
    assert spec.starter == (kind == "starter") and spec.on_hub == (kind != "starter")


def test_paths_are_local_and_a_missing_one_is_said(tmp_path, monkeypatch):
    folder = tmp_path / "org" / "repo"
    folder.mkdir(parents=True)
    (folder / "f.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    # a relative path that exists here is the file here, not the Hub's
    assert parse_spec("org/repo/f.gguf").local == (folder / "f.gguf").resolve()
    assert parse_spec("org/repo/other.gguf").kind == "file"
    assert parse_spec(str(folder)).folder
    for missing in ("./gone.gguf", "gone.gguf", str(tmp_path / "gone.gguf")):
        with pytest.raises(ModelNotFound, match="no such file"):
            parse_spec(missing)
