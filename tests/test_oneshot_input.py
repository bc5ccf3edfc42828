"""Polish: -p offline names the starter model, --continue names a chat's model that
was removed, and `echo TEXT | pocketchat -p QUESTION` uses both (commands/prompt_input.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pocketchat import cli, conversations, paths
from pocketchat.commands import prompt_input
from pocketchat.commands.prompt_input import asked, piped


# -- -p offline with nothing on disk ---------------------------------------------------------


def test_the_first_dash_p_offline_with_nothing_on_disk_mentions_the_starter(monkeypatch, capsys):
    monkeypatch.setenv("POCKETCHAT_OFFLINE", "1")
    paths.reset()
    assert cli.main(["-p", "hi"]) == 1
    err = capsys.readouterr().err
    assert "is not on disk" in err and 'pocketchat --model starter -p "QUESTION"' in err, err
    assert err.count("error:") == 1


# -- --continue after the chat's model was removed ------------------------------------------


@pytest.mark.slow
def test_continue_after_the_chats_model_was_removed_names_it(tmp_path):
    """The real chat, offline: the chat's model file is gone, so the starter is taken (--yes),
    and the chat says which model it was held with."""
    from support.uitools import ready, run, screen_text, wait_for
    from pocketchat.commands import chat
    from pocketchat.choose.selection import Selection
    from pocketchat.ui.app import create_app

    gone = tmp_path / "Mine-Q4_K_M.gguf"
    c = conversations.Conversation(model="Mine-Q4_K_M.gguf", model_path=str(gone))
    c.add("user", "hello")
    c.save()
    args = cli._root_parser().parse_args(["--continue", "--offline", "--yes"])
    sel, note = chat.resume_selection(Selection.from_args(args), conversations.last())
    assert sel.model is None
    session = chat.Session(sel, notes=(note,))

    async def scenario():
        app = create_app(session.open_engine, prepare=session.prepare, conversation=conversations.last())
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(pilot, timeout=120)
            await wait_for(pilot, lambda: "Mine-Q4_K_M.gguf" in screen_text(app), what="the note")
            text = " ".join(screen_text(app).split())
            assert "This chat was held with Mine-Q4_K_M.gguf" in text and "no longer on disk" in text
            assert session.choice.starter

    run(scenario())


def test_continue_keeps_a_model_that_is_there_or_given():
    from pocketchat.commands.chat import resume_selection
    from pocketchat.choose.selection import Selection

    args = cli._root_parser().parse_args(["--continue"])
    sel = Selection.from_args(args)
    held = conversations.Conversation(model="POCKET-35B-Q2_K")
    assert resume_selection(sel, held) == (sel.with_model("POCKET-35B-Q2_K"), None)
    given = Selection.from_args(cli._root_parser().parse_args(["--continue", "--model", "starter"]))
    assert resume_selection(given, held) == (given, None)
    assert resume_selection(sel, conversations.Conversation()) == (sel, None)


# -- stdin and -p together ------------------------------------------------------------------


def test_a_pipe_with_a_question_is_a_document_and_alone_is_the_question(tmp_path):
    import io

    question, files = asked("Summarize this.", io.StringIO("Line one.\nLine two.\n"))
    assert question == "Summarize this."
    assert [(f.name, f.text) for f in files] == [("stdin", "Line one.\nLine two.\n")]
    assert asked("Question?", None) == ("Question?", ())
    assert asked(None, io.StringIO("  piped question \n")) == ("piped question", ())
    assert asked("Question?", io.StringIO("   \n")) == ("Question?", ())
    assert asked("  ", io.StringIO("")) == ("", ())
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\nThe launch is on Friday.\n")
    question, files = asked("When?", io.StringIO("piped"), [doc])
    assert [f.name for f in files] == ["stdin", "notes.md"] and files[1].kind == "markdown"


def test_piped_reads_a_pipe_and_a_file_but_never_waits_on_a_terminal(tmp_path):
    r, w = os.pipe()
    os.write(w, "a document ✓\n".encode())
    os.close(w)
    with os.fdopen(r, encoding="utf-8") as pipe:
        assert piped(pipe) == "a document ✓\n"
    f = tmp_path / "doc.txt"
    f.write_text("from a file")
    with open(f) as stream:
        assert piped(stream) == "from a file"
    master, slave = os.openpty()  # a terminal: nothing is read (it would wait for keys)
    with os.fdopen(slave) as tty:
        assert piped(tty) is None
    os.close(master)
    with open(os.devnull) as null:  # a character device such as </dev/null
        assert piped(null) is None
    assert piped(None) is None


def test_question_from_a_real_pipe_in_a_child_process():
    code = ("import sys; from pocketchat.commands.prompt_input import asked; "
            "q, files = asked(sys.argv[1], sys.stdin); print(repr((q, files[0].name, files[0].text)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code, "What is it about?"], input="A report.\n",
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == repr(("What is it about?", "stdin", "A report.\n")), done.stderr
    assert prompt_input.__doc__ and "ollama" in prompt_input.__doc__


def test_the_one_shot_command_asks_about_the_piped_document():
    """`echo TEXT | pocketchat -p QUESTION`: oneshot's own reading of the question uses both."""
    import argparse

    from pocketchat.commands import oneshot

    read, write = os.pipe()
    os.write(write, b"The meeting moved to Tuesday.\n")
    os.close(write)
    with os.fdopen(read) as stdin:
        args = argparse.Namespace(prompt="When is the meeting?")
        question, files = oneshot.read_prompt(args, stdin)
    assert question == "When is the meeting?"
    assert [(f.name, f.text) for f in files] == [("stdin", "The meeting moved to Tuesday.\n")]
