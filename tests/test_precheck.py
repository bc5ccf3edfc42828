"""Before a download: the GGUF header over HTTP Range, the runtime's answer on the architecture,
and the fit at the smallest context. A refusal costs a few MB of transfer, not the file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from support.hubserver import HubFile
from pocketchat import cli
from pocketchat.cli import main
from pocketchat.commands import chat
from pocketchat.choose.selection import Selection
from pocketchat.errors import ModelTooLarge, UnsupportedModel
from pocketchat.store import cache
from pocketchat.store.header import CHECK_MIN_FILE_BYTES

MB16 = 16_000_000
UNKNOWN = "tester/Frob-GGUF"
HUGE = "tester/Huge-GGUF"
NORMAL = "tester/Smol-GGUF"


def header_only_gguf(path: Path, arch: str, tensors: dict[str, tuple[int, ...]]) -> Path:
    """A GGUF header declaring F16 `tensors` (shape in numpy order), then zeros to the declared
    end (a sparse file: the data is never written)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(next(iter(tensors.values()))[-1])
    w.add_head_count(8)
    w.add_head_count_kv(8)
    total = 0
    for name, shape in tensors.items():
        nbytes = int(np.prod(shape)) * 2
        w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes, raw_dtype=gguf.GGMLQuantizationType.F16)
        total += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = -(-path.stat().st_size // 32) * 32
    os.truncate(path, header + total)
    return path


@pytest.fixture
def repos(hub, tmp_path):
    # An architecture no llama.cpp knows, 24 MB (real bytes: hashed like any file).
    frob = header_only_gguf(tmp_path / "frob.gguf", "frobnicator9", {"token_embd.weight": (3000, 4096)})
    hub.add_repo(UNKNOWN, {"Frob-Q4_K_M.gguf": frob})
    # A llama whose header declares 131 GB of weights (sparse on disk; never downloaded whole).
    huge = header_only_gguf(tmp_path / "huge.gguf", "llama",
                            {"token_embd.weight": (1_000_000, 65536), "blk.0.attn_k.weight": (512, 65536)})
    hub.add_repo(HUGE, {"Huge-Q4_K_M.gguf": HubFile("Huge-Q4_K_M.gguf", source=huge,
                                                     hashes=("0" * 64, "0" * 40))})
    # A real model, bigger than the header budget: the starter GGUF.
    from pocketchat.store.starter import starter_path

    hub.add_repo(NORMAL, {"Smol-Q4_1.gguf": starter_path()})
    hub.reset_counters()
    return hub


def test_the_header_is_read_from_the_first_bytes_only(repos):
    from pocketchat.store import api as store
    from pocketchat.store.header import remote_facts

    facts = remote_facts(store.resolve(f"{HUGE}:Q4_K_M"))
    assert facts.arch == "llama" and facts.weight_bytes > 130e9
    assert facts.kv_layers == (0,)
    assert repos.bytes_served <= 1024 * 1024
    ranges = [h.get("Range") for verb, path, h in repos.requests if verb == "GET" and "/resolve/" in path]
    assert ranges == ["bytes=0-1048575"]


@pytest.mark.parametrize("repo, words", [
    (UNKNOWN, ("'frobnicator9'", "architecture the installed llama.cpp cannot load")),
    (HUGE, ("does not fit this machine", "at 2048 context")),
])
def test_pocketchat_download_refuses_before_the_file(repos, capsys, repo, words):
    assert main(["download", f"{repo}:Q4_K_M", "--yes"]) == 1
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "nothing was downloaded" in err and "Traceback" not in err
    assert err.count("error:") == 1
    assert repos.bytes_served < MB16
    assert not list(cache.repo_dir(repo).rglob("*.incomplete"))


@pytest.mark.parametrize("repo, error", [(UNKNOWN, UnsupportedModel), (HUGE, ModelTooLarge)])
def test_the_chats_download_step_refuses_too(repos, repo, error):
    class Hooks:
        questions: list[str] = []

        def confirm(self, q):
            self.questions.append(q)
            return True

        def status(self, text):
            pass

        def progress(self, *a, **k):
            pass

    args = cli._root_parser().parse_args(["--model", f"{repo}:Q4_K_M"])
    session = chat.Session(Selection.from_args(args))
    with pytest.raises(error) as info:
        session.prepare(Hooks())
    assert "nothing was downloaded" in info.value.message
    assert Hooks.questions == []  # refused before asking to download
    assert repos.bytes_served < MB16


@pytest.mark.slow
def test_a_normal_model_is_read_then_downloaded_and_verified(repos, capsys):
    from pocketchat.store.starter import starter_path

    size = starter_path().stat().st_size
    assert size > CHECK_MIN_FILE_BYTES
    assert main(["download", f"{NORMAL}:Q4_1", "--yes"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.stat().st_size == size
    # The header read (SmolLM2's is 1.8 MB: the first MiB, then the next) plus the file, once.
    assert size < repos.bytes_served <= size + 2 * 1024 * 1024
    repos.reset_counters()
    assert main(["download", f"{NORMAL}:Q4_1", "--yes"]) == 0  # on disk: nothing fetched
    assert repos.bytes_served == 0


@pytest.mark.slow
def test_a_normal_model_resumes_after_the_check(repos, capsys):
    from pocketchat.store import api as store
    from pocketchat.store.starter import starter_path

    data = starter_path().read_bytes()
    rm = store.resolve(f"{NORMAL}:Q4_1")
    partial = cache.partial_path(NORMAL, rm.files[0].etag)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(data[: 40_000_000])
    repos.reset_counters()
    assert main(["download", f"{NORMAL}:Q4_1", "--yes"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.read_bytes() == data
    assert repos.bytes_served <= len(data) - 40_000_000 + 2 * 1024 * 1024


def test_inspect_a_local_file(capsys, tiny_qwen35moe):
    import json

    assert main(["inspect", str(tiny_qwen35moe)]) == 0
    out = capsys.readouterr().out
    assert "architecture: qwen35moe; runtime can load it: yes" in out
    assert "1 with a KV cache, 3 recurrent" in out and "8 routed, 2 used per token" in out
    assert "n_ctx" in out and "32768" in out and "on this machine: fits: CPU" in out
    assert main(["inspect", str(tiny_qwen35moe), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["kv_layers"] == [3] and data["runtime_knows_arch"] is True
    assert [r["n_ctx"] for r in data["memory"]] == [2048, 8192, 32768]
    assert data["plan"]["placement"] == "cpu"


def test_inspect_on_the_hub_reads_only_the_header(repos, capsys):
    import json

    assert main(["inspect", f"{HUGE}:Q4_K_M", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["weight_bytes"] > 130e9 and data["plan"] is None
    assert "does not fit this machine" in data["verdict"]
    assert all(r["placement"] is None for r in data["memory"])
    assert repos.bytes_served <= 1024 * 1024
    assert main(["inspect", f"{UNKNOWN}:Q4_K_M"]) == 0
    assert "NO: this llama.cpp cannot load it" in capsys.readouterr().out
    assert not list(cache.repo_dir(HUGE).rglob("*.gguf"))


def test_inspect_offline_without_the_file_says_so(capsys):
    assert main(["inspect", "POCKET-35B-Q4_K_M", "--offline", "--json",
                 "--hardware", str(Path(__file__).parent / "profiles" / "linux-12gb-nvidia-32gb.json")]) == 1
    assert "cannot read the header" in capsys.readouterr().err


# -- what the terminal shows before the download question ------------------------


class _Terminal(__import__("io").StringIO):
    """stderr or stdin as a terminal: what TerminalProgress and the question write to."""

    def isatty(self) -> bool:
        return True


def test_the_checks_before_the_question_are_on_screen(repos):
    """The header read, the runtime's answer and the probe ran before the question with the
    terminal blank (4 s on a first run). Each step is a line now, rewritten as bytes arrive,
    and the question starts on a line of its own."""
    from pocketchat.choose.model import download_vet
    from pocketchat.commands.download import TerminalProgress, make_confirm
    from pocketchat.store import api as store
    from pocketchat.store.fetcher import HEADER_STEP, VET_STEP

    screen = _Terminal()
    events, at_question = [], []
    shown = TerminalProgress(screen, interval_s=0)

    def progress(p):
        gets = sum(1 for verb, path, _h in repos.requests if verb == "GET" and "/resolve/" in path)
        events.append((p, gets))
        shown(p)

    ask = make_confirm(False, stdin=_Terminal("n\n"), stream=screen)

    def confirm(plan):
        at_question.append(len(events))
        return ask(plan)

    machine = Path(__file__).parent / "profiles" / "linux-12gb-nvidia-32gb.json"  # no probe: fast
    sel = Selection.from_args(cli._root_parser().parse_args(["--hardware", str(machine)]))
    with pytest.raises(Exception, match="Not downloading"):
        store.ensure(f"{NORMAL}:Q4_1", confirm=confirm, progress=progress, vet=download_vet(sel))
    first, gets = events[0]
    assert first.phase == "checking" and first.message == HEADER_STEP and gets == 0  # before the read
    header = [p.bytes_done for p, _ in events if p.message == HEADER_STEP]
    assert header == sorted(header) and header[-1] > 1_800_000  # SmolLM2's header: 1.8 MB
    assert [p.message for p, _ in events][-1] == VET_STEP and at_question == [len(events)]
    text = screen.getvalue()
    before, question = text.split("Download ", 1) if "Download " in text else (text, "")
    assert f"{NORMAL}:Q4_1: {HEADER_STEP}" in before and f"{NORMAL}:Q4_1: {VET_STEP}" in before, text
    assert before.endswith("\n") and "[y/N]" in question, text


def test_a_header_that_trickles_in_shows_its_bytes_and_stops_with_the_rate(repos):
    """A server that sends a few bytes at a time never stalls, so only a deadline on the whole
    header read ends it (was: silent for 7 minutes)."""
    from pocketchat.errors import DownloadError
    from pocketchat.store import api as store
    from pocketchat.store.download import DownloadOptions
    from pocketchat.store.header import remote_facts

    repos.faults.trickle_bytes, repos.faults.trickle_s = 2000, 0.02  # 100 kB/s: 1 MiB in 10 s
    heard = []
    rm = store.resolve(f"{NORMAL}:Q4_1")
    with pytest.raises(DownloadError) as e:
        remote_facts(rm, options=DownloadOptions(header_timeout_s=1.0),
                     progress=lambda done, want: heard.append(done))
    message = e.value.message
    assert "reading the header of Smol-Q4_1.gguf from tester/Smol-GGUF took over 1 s" in message, message
    assert "kB/s" in message and "would take" in message and "Nothing was downloaded" in message
    assert "faster network" in e.value.hint and "resume" not in e.value.hint
    assert len(set(heard)) > 3 and heard == sorted(heard)  # the bytes as they came
    assert repos.bytes_served < 1024 * 1024


def test_a_named_model_not_on_disk_shows_the_probe_before_it_runs(repos, monkeypatch):
    """`pocketchat -p ... --model REPO:QUANT`: the machine's probe (its memory bandwidth is
    measured on a first run) comes before the model's checks; its step is on screen first."""
    from pocketchat.choose.model import PROBE_STEP, choose_model
    from pocketchat.errors import DownloadDeclined
    from pocketchat.select import probe
    from pocketchat.store.fetcher import HEADER_STEP, VET_STEP

    seen: list[str] = []
    real = probe.detect
    monkeypatch.setattr(probe, "detect", lambda **k: (seen.append("probe"), real(**k))[1])
    sel = Selection.from_args(cli._root_parser().parse_args(["--model", f"{NORMAL}:Q4_1"]))
    with pytest.raises(DownloadDeclined):
        choose_model(sel, confirm=lambda plan: seen.append("question") and False,
                     progress=lambda p: seen.append(p.message))
    steps = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
    assert steps[:2] == [PROBE_STEP, "probe"], steps
    assert steps[-3:] == [HEADER_STEP, VET_STEP, "question"], steps

    seen.clear()  # a model on disk: no step (nothing will be asked)
    choose_model(Selection.from_args(cli._root_parser().parse_args(["--model", "starter"])),
                 progress=lambda p: seen.append(p.message))
    assert PROBE_STEP not in seen
