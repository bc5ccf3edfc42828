"""`pocketchat.load()` of a model that is not on disk: `download=` decides (True, the default,
says what and how big on stderr first; False refuses with the size; a function decides), the
progress is a bar on stderr when it is a terminal or goes to `progress=`; a model on disk is
never asked about again. A real Hub on 127.0.0.1 (support.hubserver) serves a real GGUF (the
tiny qwen35moe); the fast tests stop before the model is loaded, the slow one loads and asks it."""

from __future__ import annotations

import io
import sys

import pytest

import pocketchat
from pocketchat import api
from pocketchat.errors import DownloadDeclined
from pocketchat.store.types import DownloadPlan, DownloadProgress
from support.tinyqwen35 import tiny_qwen35moe  # noqa: F401 - a fixture

REPO = "tester/Tiny-Q35-GGUF"
FILE = "tiny-qwen35moe-Q8_0.gguf"
MODEL = f"{REPO}/{FILE}"


@pytest.fixture
def served(hub, tiny_qwen35moe):
    data = tiny_qwen35moe.read_bytes()
    hub.add_repo(REPO, {FILE: data, "README.md": b"# tiny\n"})
    return data


class Stderr(io.StringIO):
    """sys.stderr as a test sees it: what was written, how many bytes the Hub had served at
    each write, and whether it says it is a terminal."""

    def __init__(self, hub, tty: bool) -> None:
        super().__init__()
        self.hub, self.tty, self.served_at = hub, tty, []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.served_at.append((self.hub.bytes_served, text))
        return super().write(text)


@pytest.fixture
def no_session(monkeypatch):
    """Stop at the chosen model (the slow test loads it): the choice `load` would open."""
    chosen = []
    monkeypatch.setattr(api, "open_session", lambda choice, **kw: chosen.append(choice) or choice)
    return chosen


def test_by_default_it_says_the_size_first_then_downloads(hub, served, no_session, monkeypatch):
    err = Stderr(hub, tty=False)
    monkeypatch.setattr(sys, "stderr", err)
    choice = pocketchat.load(MODEL)
    assert choice.path.read_bytes() == served
    first_served, first = err.served_at[0]
    assert first_served == 0  # said before a byte of the model came
    size = f"{len(served) / 1e6:.1f} MB"
    assert first.startswith(f"pocketchat: downloading {MODEL} ({size}) to ") and "free disk after" in first
    assert err.getvalue() == first  # stderr is not a terminal: no bar


def test_on_a_terminal_a_bar_follows_the_size(hub, served, no_session, monkeypatch):
    err = Stderr(hub, tty=True)
    monkeypatch.setattr(sys, "stderr", err)
    pocketchat.load(MODEL)
    text = err.getvalue()
    said = text.index("pocketchat: downloading ")
    assert said == 0 or text[said - 1] == "\n"  # a line of its own, after the checks' line
    bar = text[said:].split("\n", 1)[1]
    assert bar.startswith("\r") and "100.0%" in bar and bar.endswith("\n")  # the line is ended


def test_progress_goes_to_the_apps_function(hub, served, no_session, monkeypatch):
    err = Stderr(hub, tty=True)
    monkeypatch.setattr(sys, "stderr", err)
    seen: list[DownloadProgress] = []
    pocketchat.load(MODEL, progress=seen.append)
    assert seen and seen[-1].bytes_done == seen[-1].bytes_total == len(served)
    assert "\r" not in err.getvalue()  # the app draws it: no bar of ours
    assert err.getvalue().startswith("pocketchat: downloading ")


def test_download_false_refuses_with_the_size_and_fetches_nothing(hub, served, no_session,
                                                                   monkeypatch, capsys):
    with pytest.raises(DownloadDeclined) as info:
        pocketchat.load(MODEL, download=False)
    assert f"({len(served) / 1e6:.1f} MB)" in info.value.message
    assert "download=False" in info.value.message and "download=True" in info.value.hint
    assert hub.bytes_served == 0 and no_session == []
    assert capsys.readouterr().err == ""
    from pocketchat.store import api as store

    assert store.list_models() == []


def test_a_download_function_decides_and_sees_the_plan(hub, served, no_session, capsys):
    asked: list[DownloadPlan] = []
    with pytest.raises(DownloadDeclined, match="said no"):
        pocketchat.load(MODEL, download=lambda plan: asked.append(plan) or False)
    assert hub.bytes_served == 0
    choice = pocketchat.load(MODEL, download=lambda plan: asked.append(plan) or True)
    assert [p.total_bytes for p in asked] == [len(served)] * 2
    assert choice.path.read_bytes() == served
    assert capsys.readouterr().err == ""  # the app asked: nothing of ours on stderr
    # On disk now: never asked again, nothing fetched again.
    before = hub.bytes_served
    again = pocketchat.load(MODEL, download=lambda plan: pytest.fail("asked again"))
    assert again.path == choice.path and hub.bytes_served == before


@pytest.mark.slow
def test_a_downloaded_model_loads_and_answers(hub, served, capsys):
    pytest.importorskip("llama_cpp")
    with pocketchat.load(MODEL, ctx=256) as session:
        reply = session.chat([{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
    assert reply.finish_reason in ("stop", "length") and reply.stats.generated_tokens > 0
    err = capsys.readouterr().err
    assert err.startswith(f"pocketchat: downloading {MODEL} (") and "Traceback" not in err
