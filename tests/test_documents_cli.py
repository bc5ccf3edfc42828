"""Files on the command line and in the Python API, with the real CLI on the starter model:
`pocketchat -p QUESTION --file F` and `cat F | pocketchat -p QUESTION` answer about the file, a
file over the context is answered from retrieved passages and the sources are listed on stderr,
a file that cannot be attached is one line before any model is loaded, and `session.chat(...,
files=[path])` puts the file in the prompt (the engine's own count)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
NOTES = "# Launch notes\n\nThe launch moved to Friday the 14th. Bring the blue banner.\n"


def _run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "pocketchat", "--model", "starter", "--no-think",
                           *args], input=stdin, capture_output=True, timeout=240, cwd=REPO,
                          env=env, stdin=None if stdin is not None else subprocess.DEVNULL)


def _long_notes(lines: int = 900) -> str:
    rows = [f"Row {i}: shelf {i} holds {i % 7} jars of plum jam." for i in range(1, lines)]
    rows[611] = "Row 612: the spare key is taped under the blue flowerpot."
    return "\n".join(rows) + "\n"


def test_dash_p_with_a_file_answers_about_it(tmp_path):
    pytest.importorskip("llama_cpp")
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES)
    done = _run(["-p", "When is the launch?", "--file", str(notes)])
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.strip() and b"\x1b" not in done.stdout
    assert b"sources:" not in done.stderr  # it fit whole: no retrieval


def test_a_file_over_the_context_lists_its_sources(tmp_path):
    pytest.importorskip("llama_cpp")
    notes = tmp_path / "shelves.txt"
    notes.write_text(_long_notes())
    done = _run(["--ctx", "1024", "-p", "Where is the spare key taped?", "--file", str(notes)])
    err = done.stderr.decode()
    assert done.returncode == 0, err[-2000:]
    assert "note: the files do not fit the context: " in err and "were retrieved" in err
    sources = next(line for line in err.splitlines() if line.startswith("sources: "))
    assert "shelves.txt, lines " in sources
    spans = [s.split("lines ")[1] for s in sources.removeprefix("sources: ").split("; ")]
    assert any(int(a) <= 612 <= int(b) for a, b in (s.split("-") for s in spans if "-" in s))
    assert done.stdout.strip()


def test_a_piped_file_with_a_question_is_the_file_stdin(tmp_path):
    pytest.importorskip("llama_cpp")
    done = _run(["--ctx", "1024", "-p", "Where is the spare key taped?"],
                stdin=_long_notes().encode())
    err = done.stderr.decode()
    assert done.returncode == 0, err[-2000:]
    assert "sources: stdin, lines " in err


@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: p.write_bytes(b"\x00\x01\x02binary" * 40), "is binary data"),
    (lambda p: p.write_text(""), "is empty"),
])
def test_a_file_it_cannot_attach_is_one_line_before_the_model_loads(tmp_path, make, words):
    bad = tmp_path / "thing.txt"
    make(bad)
    done = _run(["-p", "What is in it?", "--file", str(bad)])
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b""
    first = err.splitlines()[0]
    assert first.startswith("error: thing.txt: ") and words in first, err
    assert "Loading" not in err and "loading" not in err  # refused before the model


def test_the_python_api_attaches_files(tmp_path, starter_gguf):
    pytest.importorskip("llama_cpp")
    import pocketchat
    from pocketchat.errors import ApiError, DocumentRefused

    notes = tmp_path / "notes.md"
    notes.write_text(NOTES * 4)
    with pocketchat.load(str(starter_gguf), ctx=2048) as session:
        ask = [{"role": "user", "content": "When is the launch?"}]
        bare = session.chat(ask, max_tokens=4, thinking=False)
        with_file = session.chat(ask, max_tokens=4, thinking=False, files=[notes])
        grew = with_file.stats.prompt_length - bare.stats.prompt_length
        assert grew > 60, grew  # the file's ~80 tokens and its <document> block
        with pytest.raises(DocumentRefused, match="missing.pdf: no such file"):
            session.chat(ask, files=[tmp_path / "missing.pdf"])
        with pytest.raises(ApiError, match="files are attached to a user message"):
            session.chat([{"role": "system", "content": "s"}], files=[notes])
        again = session.chat(ask, max_tokens=4, thinking=False)  # nothing was lost
        assert again.finish_reason in ("length", "stop")
