"""`pocketchat` (chat) and `pocketchat history`: flags, --continue, the offline fallback."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pocketchat import cli, conversations
from pocketchat.commands import chat
from pocketchat.choose.model import ModelChoice
from pocketchat.choose.selection import Selection
from pocketchat.errors import OfflineError
from pocketchat.types import LoadPlan


@pytest.fixture(autouse=True)
def a_terminal(monkeypatch):
    """These tests run the full-screen chat (a fake app): stdin and stdout count as a terminal."""
    monkeypatch.setattr("pocketchat.commands.oneshot._tty", lambda stream: True)


def parse(*argv: str) -> argparse.Namespace:
    return cli._root_parser().parse_args(list(argv))


def test_chat_flags_are_on_the_root_parser():
    args = parse("--continue", "--system", "Be brief.", "--no-think", "--model", "starter")
    assert (args.resume, args.system, args.no_think, args.model) == (True, "Be brief.", True,
                                                                     "starter")
    args = parse()
    assert (args.resume, args.system, args.no_think) == (False, None, False)


class FakeApp:
    def __init__(self, factory, **kwargs):
        self.factory, self.kwargs = factory, kwargs
        self.fatal_error = None
        FakeApp.made = self

    def run(self):
        return 0


def test_continue_reopens_the_last_conversation(monkeypatch):
    old = conversations.Conversation()
    old.add("user", "older")
    old.save()
    new = conversations.Conversation()
    new.add("user", "the last one")
    new.save()
    monkeypatch.setattr("pocketchat.ui.app.create_app", FakeApp)
    assert chat.run(parse("--continue", "--no-think", "--system", "S")) == 0
    kwargs = FakeApp.made.kwargs
    assert kwargs["conversation"].id == new.id
    assert kwargs["thinking"] is False and kwargs["system"] == "S"
    assert chat.run(parse()) == 0 and FakeApp.made.kwargs["conversation"] is None


def test_continue_without_saved_chats_starts_a_new_one(monkeypatch, capsys):
    monkeypatch.setattr("pocketchat.ui.app.create_app", FakeApp)
    assert chat.run(parse("--continue")) == 0
    assert FakeApp.made.kwargs["conversation"] is None
    assert "No saved conversation yet" in capsys.readouterr().err


def test_a_fatal_error_in_the_app_reaches_the_cli(monkeypatch):
    class Failing(FakeApp):
        def run(self):
            self.fatal_error = OfflineError("the Hub cannot be reached")
            return 1

    monkeypatch.setattr("pocketchat.ui.app.create_app", Failing)
    with pytest.raises(OfflineError):
        chat.run(parse())


class Hooks:
    def __init__(self, answer: bool) -> None:
        self.answer, self.questions, self.statuses, self.progressed = answer, [], [], []

    def confirm(self, question):
        self.questions.append(question)
        return self.answer

    def status(self, text):
        self.statuses.append(text)

    def progress(self, done, total=None, what=""):
        self.progressed.append((done, total, what))


def _choice(name: str) -> ModelChoice:
    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=2, n_threads_batch=2)
    return ModelChoice(name=name, path=Path("/nonexistent.gguf"), plan=plan)


@pytest.fixture
def offline_then_starter(monkeypatch):
    seen = []

    def choose_model(args, confirm=None, progress=None):
        seen.append(args.model)
        if args.model != "starter":
            raise OfflineError("POCKET-Q4 is not on disk and the Hub cannot be reached")
        return _choice("SmolLM2-135M-Instruct (starter)")

    monkeypatch.setattr("pocketchat.choose.model.choose_model", choose_model)
    return seen


def test_offline_offers_the_starter_model_and_uses_it_when_accepted(offline_then_starter):
    session = chat.Session(Selection.from_args(parse()))
    hooks = Hooks(answer=True)
    session.prepare(hooks)
    assert offline_then_starter == [None, "starter"]
    assert "cannot be reached" in hooks.questions[0] and "starter" in hooks.questions[0]
    assert session.choice.name.startswith("SmolLM2")
    assert hooks.statuses == ["Loading SmolLM2-135M-Instruct (starter)"]


def test_offline_declined_is_the_error(offline_then_starter):
    with pytest.raises(OfflineError):
        chat.Session(Selection.from_args(parse())).prepare(Hooks(answer=False))
    assert offline_then_starter == [None]


def test_offline_with_yes_takes_the_starter_without_asking(offline_then_starter):
    hooks = Hooks(answer=False)
    chat.Session(Selection.from_args(parse("--yes"))).prepare(hooks)
    assert hooks.questions == [] and offline_then_starter == [None, "starter"]


def test_download_question_and_progress_reach_the_screen(tmp_path):
    from pocketchat.store.types import DownloadPlan, DownloadProgress, RemoteFile

    hooks = Hooks(answer=True)
    plan = DownloadPlan(name="POCKET-35B-Q2_K", repo_id="FINAL-Bench/POCKET-35B-GGUF",
                        files=(RemoteFile("POCKET-35B-Q2_K.gguf", 12_900_000_000),),
                        total_bytes=12_900_000_000, transfer_bytes=12_900_000_000,
                        destination=tmp_path, free_bytes=50_000_000_000,
                        free_after_bytes=37_100_000_000)
    assert chat.confirm_adapter(hooks)(plan) is True
    assert "POCKET-35B-Q2_K" in hooks.questions[0] and "free disk after" in hooks.questions[0]
    chat.progress_adapter(hooks)(DownloadProgress(
        name="POCKET-35B-Q2_K", filename="POCKET-35B-Q2_K.gguf", phase="downloading",
        bytes_done=30, bytes_total=100))
    assert hooks.progressed == [(30, 100, "Downloading POCKET-35B-Q2_K.gguf")]


def test_history_lists_newest_first_and_warns_on_corrupt_files(capsys):
    first = conversations.Conversation()
    first.add("user", "first chat")
    first.save()
    second = conversations.Conversation()
    second.add("user", "second chat")
    second.add("assistant", "cut", interrupted=True)
    second.save()
    (second.path.parent / "bad.json").write_text("{")
    assert cli.main(["history"]) == 0
    out, err = capsys.readouterr()
    assert out.index("second chat") < out.index("first chat")
    assert "second chat  (interrupted)" in out
    assert "skipped unreadable bad.json" in err
    assert cli.main(["history", "--show", second.id]) == 0
    assert "[assistant] [interrupted]\ncut" in capsys.readouterr().out


def test_history_when_empty_says_where_chats_go(capsys):
    assert cli.main(["history"]) == 0
    assert "No saved conversations yet" in capsys.readouterr().out
