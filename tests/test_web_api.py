"""The web chat's server side against the real `pocketchat serve` on the starter: the page and
its headers, the conversations it lists and writes (the terminal chat's files), an answer
streamed and saved, stop, regenerate and edit, the model state that lets a chat go on in
another process without reading it again, and the sign-in of a server with an API key."""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path

import pytest

from support.serverproc import running

pytestmark = pytest.mark.slow
ARGS = ["--model", "starter", "--ctx", "2048", "--draft", "off"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("web")


def serve(home: Path, *extra: str):
    """`pocketchat serve` on the starter, its conversations in `home`/data."""
    env = {"POCKETCHAT_DATA_DIR": str(home / "data"), "POCKETCHAT_CACHE_DIR": str(home / "cache")}
    return running([*ARGS, *extra], home, env=env)


@pytest.fixture(scope="module")
def srv(home):
    pytest.importorskip("llama_cpp")
    with serve(home) as s:
        yield s


def events(srv, chat_id: str, payload: dict, headers: dict | None = None) -> list[dict]:
    """The answer's server-sent events, parsed."""
    conn = http.client.HTTPConnection(srv.url.removeprefix("http://"), timeout=120)
    conn.request("POST", f"/web/api/chats/{chat_id}/answer", json.dumps(payload),
                 {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    body = resp.read().decode()
    assert resp.status == 200, body
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def new_chat(srv, **fields) -> dict:
    status, chat = srv.post_json("/web/api/chats", fields)
    assert status == 201, chat
    return chat


def saved(home: Path, chat_id: str) -> dict:
    return json.loads((home / "data" / "conversations" / f"{chat_id}.json").read_text())


def test_the_page_is_served_with_a_policy_that_keeps_it_to_this_server(srv):
    conn = http.client.HTTPConnection(srv.url.removeprefix("http://"), timeout=10)
    conn.request("GET", "/")
    resp = conn.getresponse()
    page = resp.read().decode()
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/html")
    csp = resp.getheader("content-security-policy")
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert "<script>" not in page and not re.search(r"\son[a-z]+=", page)  # nothing inline
    assets = ["/" + a.lstrip("/") for a in re.findall(r'(?:src|href)="([^"#:]+)"', page)]
    assert assets, page
    total = len(page)
    for path in assets:
        conn.request("GET", path)
        asset = conn.getresponse()
        data = asset.read()
        assert asset.status == 200, path
        total += len(data)
        assert b"http://" not in data.replace(b"http://127.0.0.1", b"") or path.endswith(".css")
    assert total < 500_000


def test_a_message_is_answered_streaming_and_saved_in_the_terminal_chats_store(srv, home):
    chat = new_chat(srv)
    assert chat["messages"] == []
    got = events(srv, chat["id"], {"text": "Name a colour."})
    kinds = [e["event"] for e in got]
    assert kinds[0] == "start" and kinds[-1] == "done" and "delta" in kinds
    text = "".join(e["content"] for e in got if e["event"] == "delta")
    stats = got[-1]["stats"]
    assert text and stats["generated_tokens"] > 0 and stats["decode_tok_s"] > 0
    on_disk = saved(home, chat["id"])
    assert [m["role"] for m in on_disk["messages"]] == ["user", "assistant"]
    assert on_disk["messages"][1]["content"] == text and not on_disk["messages"][1]["interrupted"]
    listed = srv.get("/web/api/chats")[1]["chats"]
    assert listed[0]["id"] == chat["id"] and listed[0]["title"] == "Name a colour."


def test_regenerate_and_edit_redo_the_last_turn(srv, home):
    chat = new_chat(srv)
    events(srv, chat["id"], {"text": "Say one word."})
    events(srv, chat["id"], {"mode": "regenerate"})
    assert [m["role"] for m in saved(home, chat["id"])["messages"]] == ["user", "assistant"]
    events(srv, chat["id"], {"mode": "edit", "text": "Say two words."})
    messages = saved(home, chat["id"])["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["Say two words."]
    assert len(messages) == 2


def test_stop_keeps_the_answer_so_far_marked_interrupted(srv, home):
    chat = new_chat(srv)
    conn = http.client.HTTPConnection(srv.url.removeprefix("http://"), timeout=60)
    conn.request("POST", f"/web/api/chats/{chat['id']}/answer",
                 json.dumps({"text": "Write a long story about a lighthouse keeper."}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    seen = 0
    while seen < 3:  # a few pieces of the answer, then the page's stop: the connection closes
        line = resp.fp.readline()
        seen += line.startswith(b'data: {"event":"delta"')
    conn.close()
    deadline = time.monotonic() + 10
    while True:  # the server saves what it had once it sees the client gone
        answer = saved(home, chat["id"])["messages"][-1]
        if answer["content"] and not srv.get("/health")[1]["busy"] \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer["role"] == "assistant" and answer["interrupted"] and answer["content"], answer
    assert srv.get(f"/web/api/chats/{chat['id']}")[1]["messages"][-1]["interrupted"]


def test_settings_per_chat_and_a_refusal_that_names_the_field(srv):
    chat = new_chat(srv, system="You answer in French.", thinking_budget=64)
    assert chat["system"] == "You answer in French." and chat["thinking_budget"] == 64
    status, body = srv.request("PATCH", f"/web/api/chats/{chat['id']}",
                               json.dumps({"thinking_budget": -1}).encode(),
                               {"Content-Type": "application/json"})
    assert status == 400 and "thinking_budget" in body["error"]["message"]
    status, body = srv.request("PATCH", f"/web/api/chats/{chat['id']}",
                               json.dumps({"title": "French"}).encode(),
                               {"Content-Type": "application/json"})
    assert status == 200 and body["title"] == "French"


def test_no_id_reaches_a_path_outside_the_store(srv):
    for bad in ("..%2F..%2Fetc%2Fpasswd", "%2E%2E", "a%20b", ".hidden"):
        status, body = srv.get(f"/web/api/chats/{bad}")
        assert status == 404, (bad, body)


def test_a_file_too_big_or_unreadable_is_one_clear_refusal_and_nothing_is_saved(srv, home):
    chat = new_chat(srv)
    status, body = srv.post_json(f"/web/api/chats/{chat['id']}/answer",
                                 {"text": "read it", "files": [{"name": "x.bin",
                                                                 "data": "AAEC/w=="}]})
    assert status == 400 and "x.bin" in body["error"]["message"], body
    assert not (home / "data" / "conversations" / f"{chat['id']}.json").exists()


def test_a_chat_goes_on_in_another_server_process_from_its_saved_state(home, tmp_path):
    pytest.importorskip("llama_cpp")
    with serve(home) as first:
        chat = new_chat(first, system="You are terse. " * 60)
        events(first, chat["id"], {"text": "Name a fruit."})
        state = home / "data" / "conversations" / "states" / f"{chat['id']}.state"
        deadline = time.monotonic() + 30
        while not state.exists() and time.monotonic() < deadline:  # saved after the answer
            time.sleep(0.1)
    assert state.exists()
    with serve(home) as second:  # a new process: nothing in its prompt cache
        got = events(second, chat["id"], {"text": "And a vegetable?"})
    stats = got[-1]["stats"]
    assert stats["reused_tokens"] > 300, stats  # the system prompt and first turn, not read again
    assert stats["prompt_tokens"] < stats["prompt_length"] - 300


def test_sign_in_turns_the_key_into_a_strict_http_only_cookie(tmp_path):
    pytest.importorskip("llama_cpp")
    with serve(tmp_path, "--api-key", "sesame") as srv:
        conn = http.client.HTTPConnection(srv.url.removeprefix("http://"), timeout=10)
        for page in ("/", "/signin"):  # the pages themselves ask for the key
            conn.request("GET", page)
            resp = conn.getresponse()
            assert resp.status == 200 and b"<html" in resp.read(), page
        assert srv.get("/web/api/chats")[0] == 401
        assert srv.post_json("/web/api/signin", {"key": "wrong"})[0] == 401
        conn.request("POST", "/web/api/signin", json.dumps({"key": "sesame"}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        cookie = resp.getheader("set-cookie")
        assert resp.status == 204 and "HttpOnly" in cookie and "SameSite=strict" in cookie
        token = cookie.split(";", 1)[0]
        assert srv.get("/web/api/chats", headers={"Cookie": token})[0] == 200
        assert srv.get("/v1/models", headers={"Cookie": "pocketchat_session=forged"})[0] == 401


def test_pocketchat_web_says_where_the_page_is_once_ready(tmp_path):
    pytest.importorskip("llama_cpp")
    import os
    import signal
    import subprocess
    import sys

    from support import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "POCKETCHAT_DATA_DIR": str(tmp_path / "data"),
           "POCKETCHAT_CACHE_DIR": str(tmp_path / "cache")}
    log = tmp_path / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pocketchat", "web", "--no-browser",
                                 "--model", "starter", "--port", "0"], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while "web chat:" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        text = log.read_text()
        found = re.search(r"web chat: (http://127\.0\.0\.1:\d+/)", text)
        assert found and "ready:" in text, text
        conn = http.client.HTTPConnection(found.group(1)[7:-1], timeout=10)
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert proc.returncode == 0
