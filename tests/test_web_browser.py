"""The web chat in a real headless Chromium against the real `pocketchat serve` on 127.0.0.1: on
the starter (send, stream, figures, stop, a file attached, model and file text shown as text
never as HTML, a chat continued in the terminal chat and back, sign-in with a key from a second
browser, a phone's width) and on the tiny `qwen35moe` with POCKET's real Qwen3.6 template (a
thought folded, ended by "answer now"). Each step's screenshot is kept under
test-artifacts/web/ (support/browser.py)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from support import tinyqwen35
from support.browser import Console, Shots, chromium
from support.serverproc import running

pytestmark = pytest.mark.slow
ARGS = ["--ctx", "8192", "--draft", "off"]
IDLE = "body[data-state='idle']"


def serve(home: Path, model: str, *extra: str):
    env = {"POCKETCHAT_DATA_DIR": str(home / "data"), "POCKETCHAT_CACHE_DIR": str(home / "cache")}
    return running(["--model", model, *ARGS, *extra], home, env=env)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("webpage")


@pytest.fixture(scope="module")
def srv(home):
    pytest.importorskip("llama_cpp")
    with serve(home, "starter") as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    p = context.new_page()
    p.console = Console(p)
    p.shots = Shots(request.node.name)
    yield p
    context.close()


def chats_on_disk(home: Path) -> list[dict]:
    folder = home / "data" / "conversations"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def send(page, text: str, timeout: float = 120_000) -> None:
    page.fill("#composer", text)
    page.press("#composer", "Enter")
    page.wait_for_selector("body[data-state='answering']", timeout=10_000)
    page.wait_for_selector(IDLE, timeout=timeout)


def wait_until(check, timeout: float, what: str):
    """Poll `check()` from here (the page's CSP forbids the string evaluation that Playwright's
    wait_for_function needs) until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def text_of(page, selector: str) -> str:
    found = page.locator(selector)
    return found.last.inner_text() if found.count() else ""


def only_this_server(console: Console, url: str) -> None:
    others = [r for r in console.requests if not r.startswith(url) and not r.startswith("data:")]
    assert others == [], others
    assert console.errors == [], console.errors


def test_send_streams_an_answer_with_its_figures_and_loads_fast(srv, page, home):
    started = time.monotonic()
    page.goto(srv.url + "/")
    page.wait_for_selector("#composer")
    loaded = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    assert loaded < 1000, loaded  # milliseconds from the request to a usable page
    assert time.monotonic() - started < 10
    wait_until(lambda: "SmolLM2" in text_of(page, "#model-info"), 10, "the model's name")
    page.shots.take(page, "loaded")
    page.fill("#composer", "Name three colours.")
    page.press("#composer", "Enter")
    page.wait_for_selector(".message.assistant .content", timeout=60_000)
    page.shots.take(page, "streaming")
    page.wait_for_selector(IDLE, timeout=120_000)
    answer = page.locator(".message.assistant").last
    assert answer.locator(".content").inner_text().strip()
    figures = answer.locator(".figures").inner_text()
    assert "tok/s" in figures and "first token" in figures and "tokens" in figures, figures
    assert page.locator("#context-meter").inner_text().strip()
    page.shots.take(page, "answered")
    saved = [c for c in chats_on_disk(home) if c["messages"]
             and c["messages"][0]["content"] == "Name three colours."]
    assert saved and saved[0]["messages"][1]["content"].strip()
    assert page.locator(f".chat-item[data-id='{saved[0]['id']}']").count() == 1
    only_this_server(page.console, srv.url)


def test_stop_ends_the_answer_and_keeps_what_was_written(srv, page, home):
    page.goto(srv.url + "/")
    page.fill("#composer", "Write a very long story about a lighthouse keeper and the sea.")
    page.press("#composer", "Enter")
    wait_until(lambda: len(text_of(page, ".message.assistant .content")) > 20, 60,
               "the answer to stream")
    page.click("#stop")
    page.wait_for_selector(IDLE, timeout=20_000)
    page.shots.take(page, "stopped")
    figures = page.locator(".message.assistant").last.locator(".figures").inner_text()
    assert "interrupted" in figures, figures
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        chat = [c for c in chats_on_disk(home) if c["messages"] and
                c["messages"][0]["content"].startswith("Write a very long story")]
        if chat and chat[0]["messages"][-1]["interrupted"] and chat[0]["messages"][-1]["content"]:
            break
        time.sleep(0.2)
    assert chat and chat[0]["messages"][-1]["interrupted"], chat


def test_model_text_file_names_and_saved_chats_never_run_as_html(srv, page, home):
    attack = '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> **bold**'
    folder = home / "data" / "conversations"
    chat = {"version": 1, "id": "20260101-000000-abcdef", "title": "<b>title</b>", "created": 1.0,
            "updated": time.time() + 3600, "model": "", "model_path": "", "system": None,
            "messages": [
                {"role": "user", "content": attack, "thinking": "", "stats": None,
                 "interrupted": False, "created": 1.0,
                 "attachments": [{"name": "<img src=y onerror=window.__pwned=3>.txt",
                                  "text": "x", "sha256": "", "kind": "text", "size": 1}]},
                {"role": "assistant", "content": attack + "\n\n```html\n<script>window.__pwned=4"
                 "</script>\n```\n[link](javascript:window.__pwned=5)", "thinking": attack,
                 "stats": None, "interrupted": False, "created": 2.0}]}
    (folder / f"{chat['id']}.json").write_text(json.dumps(chat))
    page.goto(srv.url + f"/#chat={chat['id']}")
    page.wait_for_selector(".message.assistant .content")
    page.shots.take(page, "saved-attack")
    for link in page.locator("#messages a").all():
        link.click(timeout=2000, no_wait_after=True)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages img, #messages script, #chat-list b").count() == 0
    assert "<img src=x" in page.locator(".message.user .content").inner_text()
    assert "<img src=x" in page.locator(".message.assistant .content").inner_text()
    assert "onerror=window.__pwned=3" in page.locator(".message.user .attachment").inner_text()
    hrefs = page.eval_on_selector_all("#messages a", "as => as.map(a => a.getAttribute('href'))")
    assert not any((h or "").startswith("javascript:") for h in hrefs), hrefs
    send(page, "Repeat exactly: <img src=z onerror=\"window.__pwned=6\"> <script>window.__pwned=7</script>")
    page.shots.take(page, "live-attack")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages img, #messages script").count() == 0


def test_a_file_attached_goes_with_the_message(srv, page, home, tmp_path):
    note = tmp_path / "notes.txt"
    note.write_text("The code word for the meeting is heliotrope.\n")
    page.goto(srv.url + "/")
    page.set_input_files("#file-input", str(note))
    page.wait_for_selector("#chips .chip")
    assert "notes.txt" in page.locator("#chips").inner_text()
    page.shots.take(page, "attached")
    send(page, "What is the code word?")
    assert "notes.txt" in page.locator(".message.user .attachment").last.inner_text()
    page.shots.take(page, "answered")
    chat = [c for c in chats_on_disk(home) if c["messages"]
            and c["messages"][0]["content"] == "What is the code word?"]
    assert chat and chat[0]["messages"][0]["attachments"][0]["name"] == "notes.txt"
    assert "heliotrope" in chat[0]["messages"][0]["attachments"][0]["text"]


def test_a_long_file_shows_its_reading_and_the_page_stays_responsive(srv, page, tmp_path):
    report = tmp_path / "report.txt"
    lines = [f"Line {n}: the harbour log records {n * 7} crates of apples and {n} of pears."
             for n in range(320)]
    report.write_text("\n".join(lines) + "\n")  # about 6,000 of the starter's tokens
    page.goto(srv.url + "/")
    page.set_input_files("#file-input", str(report))
    page.wait_for_selector("#chips .chip")
    page.fill("#composer", "How many crates of pears on line 12?")
    page.press("#composer", "Enter")
    page.wait_for_selector("#progress", state="visible", timeout=30_000)
    page.shots.take(page, "reading")
    started = time.monotonic()
    page.click("#settings")  # while the prompt is read, the page answers at once
    page.wait_for_selector("#chat-settings", state="visible", timeout=2_000)
    assert time.monotonic() - started < 1.0
    reading = page.locator("#progress-text").inner_text()
    assert "/" in reading and "token" in reading, reading
    page.shots.take(page, "settings-while-reading")
    page.wait_for_selector(IDLE, timeout=180_000)
    page.shots.take(page, "answered")
    assert page.locator(".message.assistant").last.locator(".figures").inner_text()


def test_a_chat_goes_on_in_the_terminal_chat_and_back(srv, page, home):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    from support import terminal
    from support.terminal import Tmux

    page.goto(srv.url + "/")
    send(page, "Hello from the browser.")
    env = {"POCKETCHAT_DATA_DIR": str(home / "data"), "POCKETCHAT_CACHE_DIR": str(home / "cache")}
    command, exit_file = terminal.command(home, "--model starter --continue --no-think", env)
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        screen = tmux.wait_for(terminal.ready, 90, "the terminal chat to load")
        assert "Hello from the browser." in screen, screen
        tmux("send-keys", "-t", "e2e", "-l", "Hello from the terminal.")
        tmux.wait_for(lambda s: "Hello from the terminal." in s, 10, "the message typed")
        tmux("send-keys", "-t", "e2e", "Enter")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            turns = [m for c in chats_on_disk(home) for m in c["messages"]]
            if any(m["content"] == "Hello from the terminal." for m in turns) and \
                    turns[-1]["role"] == "assistant" and not turns[-1]["interrupted"]:
                break
            time.sleep(0.3)
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()
    page.reload()
    page.wait_for_selector(".chat-item")
    page.locator(".chat-item").first.click()
    wait_until(lambda: "Hello from the terminal." in text_of(page, "#messages"), 10,
               "the terminal's turn in the page")
    page.shots.take(page, "terminal-turn-in-page")
    send(page, "And back in the browser.")
    texts = page.locator(".message.user .content").all_inner_texts()
    assert texts[-3:] == ["Hello from the browser.", "Hello from the terminal.",
                          "And back in the browser."], texts


def test_a_phone_width_layout(srv, browser):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True)
    page = context.new_page()
    console = Console(page)
    shots = Shots("test_a_phone_width_layout")
    page.goto(srv.url + "/")
    page.wait_for_selector("#composer")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.locator("#menu").is_visible() and page.locator("#send").is_visible()
    box = page.locator("#composer").bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390
    shots.take(page, "phone")
    page.click("#menu")
    page.wait_for_selector("#chat-list", state="visible")
    shots.take(page, "phone-menu")
    assert console.errors == []
    context.close()


def test_sign_in_with_the_key_from_a_second_browser(browser, tmp_path):
    pytest.importorskip("llama_cpp")
    with serve(tmp_path, "starter", "--api-key", "open-sesame") as srv:
        first = browser.new_context()
        page = first.new_page()
        shots = Shots("test_sign_in_with_the_key_from_a_second_browser")
        page.goto(srv.url + "/")
        page.wait_for_url("**/signin", timeout=10_000)
        page.fill("#key", "wrong")
        page.click("#signin")
        page.wait_for_selector("#signin-error", state="visible")
        shots.take(page, "wrong-key")
        page.fill("#key", "open-sesame")
        page.click("#signin")
        page.wait_for_selector("#composer", timeout=10_000)
        cookie = [c for c in first.cookies() if c["name"] == "pocketchat_session"]
        assert cookie and cookie[0]["httpOnly"] and cookie[0]["sameSite"] == "Strict"
        send(page, "Hello.")
        shots.take(page, "signed-in")
        second = browser.new_context()  # another browser: not signed in
        other = second.new_page()
        other.goto(srv.url + "/")
        other.wait_for_url("**/signin", timeout=10_000)
        shots.take(other, "second-browser")
        first.close()
        second.close()


def test_a_thought_is_folded_and_answer_now_ends_it(browser, tmp_path):
    pytest.importorskip("llama_cpp")
    # a model that never ends a thought or an answer itself: only the click ends the thought,
    # and the answer ends where the context does
    gguf = tinyqwen35.write_tiny_qwen35moe(tmp_path / "q36.gguf", n_layer=48,
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE,
                                           never=("</think>", "<|im_end|>", "<|endoftext|>"))
    with serve(tmp_path, str(gguf), "--parallel", "1", "--ctx", "4096") as srv:
        status, chat = srv.post_json("/web/api/chats", {"thinking_budget": 3500})
        assert status == 201, chat
        context = browser.new_context()
        page = context.new_page()
        shots = Shots("test_a_thought_is_folded_and_answer_now_ends_it")
        page.goto(srv.url + f"/#chat={chat['id']}")
        page.wait_for_selector("#composer")
        page.fill("#composer", "Think about a colour.")
        page.press("#composer", "Enter")
        now = page.locator(".message.assistant").last.locator(".answer-now")
        now.wait_for(state="visible", timeout=60_000)
        shots.take(page, "thinking")
        now.click(timeout=10_000)
        page.wait_for_selector(IDLE, timeout=120_000)
        answer = json.loads(next((tmp_path / "data" / "conversations").glob("*.json"))
                            .read_text())["messages"][-1]
        assert answer["stats"]["thinking_end"] == "user"  # the click ended it
        shots.take(page, "answered")
        thought = page.locator(".message.assistant details.thought").last
        assert thought.count() == 1 and not thought.evaluate("d => d.open")
        assert answer["thinking"] and answer["stats"]["thinking_tokens"] > 0
        assert answer["stats"]["finish_reason"] in ("stop", "length")
        context.close()


def test_a_model_process_that_stops_responding_is_shown_and_then_cleared(srv, page):
    import os
    import signal

    import psutil

    page.goto(srv.url + "/")
    page.wait_for_selector("#composer")
    workers = psutil.Process(srv.pid).children(recursive=True)
    assert workers
    try:
        for worker in workers:
            os.kill(worker.pid, signal.SIGSTOP)
        wait_until(lambda: "respond" in text_of(page, "#status"), 20, "the page to say so")
        page.shots.take(page, "not-responding")
    finally:
        for worker in workers:
            os.kill(worker.pid, signal.SIGCONT)
    wait_until(lambda: not page.locator("#status").is_visible(), 20, "the note to go")
    page.shots.take(page, "responding-again")
