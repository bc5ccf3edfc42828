"""The Python API (`pocketchat.load()`): the starter model through the same path as the CLI,
typed chunks and results, tools and JSON output, early stops, closing; the docs' example
run as written; `import pocketchat` stays cheap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pocketchat
from pocketchat.engines.types import Chunk, Message
from pocketchat.errors import ApiError, EngineError

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
HI = [{"role": "user", "content": "Say hello in three words."}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


@pytest.fixture(scope="module")
def session():
    pytest.importorskip("llama_cpp")
    with pocketchat.load("starter", ctx=1024) as s:
        yield s


def test_load_takes_the_clis_choice_and_answers(session):
    assert session.name == "SmolLM2-135M-Instruct (starter)" and session.info.n_ctx == 1024
    assert session.plan is not None and session.path is not None and session.path.is_file()
    result = session.chat(HI, max_tokens=8, temperature=0)
    assert isinstance(result, pocketchat.ChatResult)
    assert result.text.strip() and result.finish_reason in ("stop", "length")
    assert 0 < result.stats.generated_tokens <= 8 and result.stats.prompt_length > 5


def test_streaming_yields_typed_chunks_with_stats(session):
    chunks = list(session.chat([Message("user", "Count to ten.")], stream=True, max_tokens=12,
                               temperature=0, options=None))
    assert all(isinstance(c, Chunk) for c in chunks)
    assert chunks[-1].finish_reason in ("stop", "length")
    assert [c for c in chunks if c.finish_reason] == [chunks[-1]]
    assert 0 < chunks[-1].stats.generated_tokens <= 12
    whole = session.chat([Message("user", "Count to ten.")], max_tokens=12, temperature=0)
    assert "".join(c.text for c in chunks) == whole.text  # greedy: the same answer


def pocketchat_options(**kw):
    from pocketchat.engines.types import ChatOptions

    return ChatOptions(**kw)


def test_stopping_early_stops_the_model_and_the_session_goes_on(session):
    stream = session.chat([{"role": "user", "content": "Tell a long story."}], stream=True,
                          max_tokens=2000, options=pocketchat_options(ignore_eos=True))
    first = next(stream)
    assert isinstance(first, Chunk)
    with pytest.raises(EngineError, match="one answer at a time"):
        session.chat(HI, max_tokens=2)
    stream.close()  # the app stops reading: the 2000 tokens are not written
    again = session.chat(HI, max_tokens=4)
    assert again.finish_reason in ("stop", "length")


def test_bad_input_is_an_error_naming_it_before_anything_runs(session):
    with pytest.raises(ApiError) as info:
        session.chat([{"role": "wizard", "content": "x"}], stream=True)
    assert info.value.param == "messages[0].role" and isinstance(info.value, ValueError)
    with pytest.raises(ApiError) as info:
        session.chat(HI, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    assert info.value.param == "tool_choice.function.name"


def test_tools_and_json_schema(session):
    jsonschema = pytest.importorskip("jsonschema")
    result = session.chat([{"role": "user", "content": "What is the weather in Paris?"}],
                          tools=[WEATHER], tool_choice="required", max_tokens=60, temperature=0)
    assert result.finish_reason == "tool_calls" and result.tool_calls
    for call in result.tool_calls:
        assert call.name == "get_weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.arguments), CITY)
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    answer = session.chat([{"role": "user", "content": "Invent a person."}], max_tokens=200,
                          temperature=0.7, seed=11,
                          response_format={"type": "json_schema",
                                           "json_schema": {"name": "person", "schema": person}})
    assert answer.finish_reason == "stop", answer.text
    jsonschema.validate(answer.json(), person)


def test_a_closed_session_says_so():
    with pocketchat.load("starter", ctx=512) as s:
        assert s.chat(HI, max_tokens=2).text is not None
    with pytest.raises(EngineError, match="closed"):
        s.chat(HI)


def readme_example() -> str:
    """The code block of docs/python.md's "From Python" section, verbatim."""
    readme = (REPO / "docs" / "python.md").read_text()
    section = readme.split("# From Python", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


def test_the_readme_example_runs_as_written_as_a_script(tmp_path):
    """Copied into app.py and run with `python app.py`: no main guard, no network, a fresh
    cache (the conftest's: nothing downloaded, the Hub unreachable); what the user sees."""
    example = readme_example()
    assert "__main__" not in example and len(example.strip().splitlines()) <= 16
    (tmp_path / "app.py").write_text(example)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the project as installed
    assert env["HF_ENDPOINT"].startswith("http://127.0.0.1:")  # nothing reaches the internet
    done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stderr.strip() == "", done.stderr[-3000:]
    lines = done.stdout.rstrip().splitlines()
    assert "".join(lines[:-2]).strip(), done.stdout  # the streamed answer
    assert re.fullmatch(r"\d+ tokens at \d+/s", lines[-2]), done.stdout
    name, _, arguments = lines[-1].partition(" ")
    assert name == "get_weather" and isinstance(json.loads(arguments)["city"], str), lines[-1]


def test_importing_pocketchat_stays_cheap():
    code = ("import sys, pocketchat; print(sorted(m for m in sys.modules if m.startswith('pocketchat.')"
            " or m in ('llama_cpp', 'starlette', 'textual')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_complete_continues_a_raw_prompt(session):
    from pocketchat.engines.types import ChatOptions

    greedy = ChatOptions(repeat_penalty=1.0, ignore_eos=True)
    result = session.complete("The capital of France is", max_tokens=8, temperature=0,
                              logprobs=1, options=greedy)
    assert isinstance(result, pocketchat.ChatResult) and result.text.startswith(" Paris")
    assert result.thinking == "" and result.tool_calls == () and result.finish_reason == "length"
    assert result.stats.prompt_length == 5 and result.stats.generated_tokens == 8  # no template
    assert "".join(lp.token for lp in result.logprobs) == result.text
    chunks = list(session.complete("The capital of France is", max_tokens=8, temperature=0,
                                   options=greedy, stream=True))
    assert all(isinstance(c, Chunk) for c in chunks) and chunks[-1].finish_reason == "length"
    assert "".join(c.text for c in chunks) == result.text
