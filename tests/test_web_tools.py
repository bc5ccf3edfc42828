"""Tools in the web chat: a real stdio MCP server (tests/support/mcp_server.py, written with the
`mcp` SDK) behind the real `pocketchat serve --mcp` on the tiny `qwen35moe` with POCKET's real
Qwen3.6 template (the tool is forced, so the random model's call is well-formed). The call is
confirmed through the page's API and in a real Chromium; refusing tells the model; "always" is
kept with the chat; the result goes back and the loop ends; the next turn reads only its own
new tokens."""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from support import REPO, tinyqwen35
from support.serverproc import running

pytestmark = pytest.mark.slow
SERVER = REPO / "tests" / "support" / "mcp_server.py"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("webtools")


@pytest.fixture(scope="module")
def srv(home):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("mcp")
    gguf = tinyqwen35.write_tiny_qwen35moe(  # ASCII only: its answers end (an end token is
        home / "q36.gguf", chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE,  # one in 97), and
        ascii_only=True)  # the history rendered from them extends its state exactly
    config = home / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [str(SERVER), "ok"], "safe": ["big", "fail"]}}}))
    env = {"POCKETCHAT_DATA_DIR": str(home / "data"), "POCKETCHAT_CACHE_DIR": str(home / "cache")}
    with running(["--model", str(gguf), "--ctx", "16384", "--draft", "off", "--parallel", "1",
                  "--think", "off", "--mcp", str(config)], home, env=env) as s:
        yield s


def answer(srv, chat_id: str, payload: dict, choice: str | None = None) -> list[dict]:
    """The answer's events; each tool call that asks is answered `choice` as the page would."""
    conn = http.client.HTTPConnection(srv.url.removeprefix("http://"), timeout=180)
    conn.request("POST", f"/web/api/chats/{chat_id}/answer", json.dumps(payload),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    got = []
    for line in resp:
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[6:])
        got.append(event)
        if event["event"] == "tool_call" and event["ask"]:
            assert choice is not None, event
            threading.Thread(target=srv.post_json, daemon=True, args=(
                f"/web/api/chats/{chat_id}/tools/{event['call_id']}", {"choice": choice})).start()
    return got


def new_chat(srv) -> str:
    status, chat = srv.post_json("/web/api/chats", {})
    assert status == 201, chat
    return chat["id"]


def saved(home: Path, chat_id: str) -> dict:
    return json.loads((home / "data" / "conversations" / f"{chat_id}.json").read_text())


def test_the_page_is_told_the_tools(srv):
    tools = {t["name"]: t for t in srv.get("/web/api/info")[1]["tools"]}
    assert {"add", "echo", "big"} <= set(tools) and tools["big"]["safe"] and not tools["add"]["safe"]
    assert tools["add"]["server"] == "calc" and "Add two integers" in tools["add"]["description"]


def test_a_confirmed_call_runs_and_its_result_goes_back_to_the_model(srv, home):
    chat_id = new_chat(srv)
    got = answer(srv, chat_id, {"text": "Add two numbers.", "tool": "add"}, choice="once")
    kinds = [e["event"] for e in got]
    assert kinds[0] == "start" and kinds[-1] == "done", kinds
    call = next(e for e in got if e["event"] == "tool_call")
    result = next(e for e in got if e["event"] == "tool_result")
    args = json.loads(call["arguments"])
    assert call["name"] == "add" and call["ask"] and set(args) == {"a", "b"}
    assert result["ok"] and result["text"] == str(args["a"] + args["b"])
    assert kinds.index("step") > kinds.index("tool_result")  # then the model answered again
    messages = saved(home, chat_id)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["name"] == "add"
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    assert messages[2]["content"] == result["text"] and not messages[3]["interrupted"]


def test_a_refused_call_is_not_run_and_the_model_is_told(srv, home):
    chat_id = new_chat(srv)
    got = answer(srv, chat_id, {"text": "Add two numbers.", "tool": "add"}, choice="deny")
    result = next(e for e in got if e["event"] == "tool_result")
    assert not result["ok"] and "did not allow" in result["text"]
    tool_turn = [m for m in saved(home, chat_id)["messages"] if m["role"] == "tool"][0]
    assert "did not allow" in tool_turn["content"]
    assert got[-1]["event"] == "done"


def test_always_is_kept_with_the_chat_and_a_safe_tool_never_asks(srv, home):
    chat_id = new_chat(srv)
    answer(srv, chat_id, {"text": "Add.", "tool": "add"}, choice="always")
    assert "add" in saved(home, chat_id)["tool_answers"]["always"]
    again = answer(srv, chat_id, {"text": "Add again.", "tool": "add"})  # nothing to answer
    assert [e["ask"] for e in again if e["event"] == "tool_call"] == [False]


def test_a_huge_result_is_cut_and_a_failing_tool_is_one_line_the_model_reads(srv, home):
    chat_id = new_chat(srv)
    huge = answer(srv, chat_id, {"text": "Big.", "tool": "big"})  # safe: nothing to answer
    assert [e["ask"] for e in huge if e["event"] == "tool_call"] == [False]
    result = next(e for e in huge if e["event"] == "tool_result")
    assert result["ok"] and result["note"] and len(result["text"]) < 100_000
    tool_turn = [m for m in saved(home, chat_id)["messages"] if m["role"] == "tool"][0]
    assert len(tool_turn["content"]) < 20_000 and result["note"] in tool_turn["content"]
    failed = answer(srv, new_chat(srv), {"text": "Fail.", "tool": "fail"})
    result = next(e for e in failed if e["event"] == "tool_result")
    assert not result["ok"] and "fail" in result["text"] and result["note"], result
    assert "\n" not in result["note"] and failed[-1]["event"] == "done"


def test_the_turn_after_a_tool_call_reads_only_its_new_tokens(srv, home):
    chat_id = new_chat(srv)
    answer(srv, chat_id, {"text": "Add two numbers.", "tool": "add"}, choice="once")
    before = saved(home, chat_id)["messages"][-1]["stats"]
    got = answer(srv, chat_id, {"text": "Thanks."})
    stats = got[-1]["stats"]
    assert stats["reused_tokens"] >= 0.98 * before["context_used"], (before, stats)
    assert stats["prompt_tokens"] <= 48, stats  # "Thanks." and the turn's seams, not the chat


def test_an_unknown_forced_tool_is_refused_before_anything_is_saved(srv, home):
    chat_id = new_chat(srv)
    status, body = srv.post_json(f"/web/api/chats/{chat_id}/answer",
                                 {"text": "hi", "tool": "no_such_tool"})
    assert status == 400 and "no_such_tool" in body["error"]["message"]
    assert not (home / "data" / "conversations" / f"{chat_id}.json").exists()


def test_the_call_confirmed_in_a_real_browser(srv, home):
    from support.browser import Shots, chromium

    with chromium() as browser:
        page = browser.new_page()
        shots = Shots("test_the_call_confirmed_in_a_real_browser")
        page.goto(srv.url + "/")
        page.wait_for_selector("#tool-choice", state="visible")
        page.select_option("#tool-choice", "add")
        page.fill("#composer", "Add two numbers.")
        page.press("#composer", "Enter")
        page.wait_for_selector(".tool-call .tool-once", state="visible", timeout=60_000)
        shots.take(page, "asks")
        page.click(".tool-once")
        page.wait_for_selector(".tool-result", timeout=60_000)
        page.wait_for_selector("body[data-state='idle']", timeout=120_000)
        shots.take(page, "answered")
        assert "allowed once" in page.locator(".tool-decision").first.inner_text()
        assert page.locator(".message.assistant").count() == 2  # before and after the tool
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chats = [json.loads(p.read_text())
                     for p in (home / "data" / "conversations").glob("*.json")]
            done = [c for c in chats if c["messages"][0]["content"] == "Add two numbers."
                    and any(m["role"] == "tool" for m in c["messages"])
                    and c["messages"][-1]["role"] == "assistant"]
            if done:
                break
            time.sleep(0.2)
        assert done
