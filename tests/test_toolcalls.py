"""Tool calls parsed from recorded answers (as models write them), streamed token by token.

The stream is the engine's: the think splitter first, then the tool-call parser on the answer
text (`engines.answer.AnswerStream`), so these are the engine's results for these answers.
"""

from __future__ import annotations

import json
import random

import pytest

from pocketchat.engines.answer.stream import AnswerStream
from pocketchat.engines.constrain.toolcalls import ToolCallParser, call_format
from pocketchat.engines.constrain.tools import template_messages
from pocketchat.engines.types import Message, TokenLogprob, ToolCall

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["c", "f"]}, "hourly": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
TOOLS = (WEATHER, TIME)

XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
XML_CALL_2 = ("<tool_call>\n<function=get_time>\n<parameter=zone>\nEurope/Paris\n</parameter>\n"
              "</function>\n</tool_call>")
JSON_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'


def pieces(text: str, seed: int = 0) -> list[str]:
    """The text cut into random token-sized pieces (1-6 characters)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 6)
        out.append(text[i:i + n])
        i += n
    return out


def run(answer: str, fmt: str = "xml", *, in_thinking: bool = False, seed: int = 0):
    stream = AnswerStream(in_thinking=in_thinking, parser=ToolCallParser(fmt, TOOLS))
    text, thinking, calls = [], [], []
    for part in pieces(answer, seed):
        piece = stream.feed(part)
        text.append(piece.text)
        thinking.append(piece.thinking)
        calls.extend(piece.calls)
    last = stream.flush()
    return "".join(text) + last.text, "".join(thinking) + last.thinking, calls + list(last.calls)


def args(call: ToolCall) -> dict:
    return json.loads(call.arguments)


@pytest.mark.parametrize("seed", range(5))
def test_an_xml_call_becomes_a_tool_call_with_typed_arguments(seed):
    text, thinking, calls = run(XML_CALL, seed=seed)
    assert text == "" and thinking == ""
    assert [c.name for c in calls] == ["get_weather"]
    assert args(calls[0]) == {"city": "Paris", "days": 3}  # the integer parameter is a number
    assert calls[0].id.startswith("call_") and len(calls[0].id) > 10


@pytest.mark.parametrize("seed", range(5))
def test_a_json_call_becomes_a_tool_call(seed):
    text, _, calls = run(JSON_CALL, "json", seed=seed)
    assert text == ""
    assert [(c.name, args(c)) for c in calls] == [("get_weather", {"city": "Paris", "days": 3})]


def test_a_call_written_inside_the_reasoning_is_never_taken():
    answer = f"I could call it like this: {XML_CALL} but I will not.</think>\n\nIt is sunny."
    text, thinking, calls = run(answer, in_thinking=True)
    assert calls == []
    assert "<tool_call>" in thinking and text == "It is sunny."


def test_text_before_a_call_stays_content():
    text, _, calls = run(f"Let me check the weather.\n\n{XML_CALL}")
    assert text == "Let me check the weather."
    assert [c.name for c in calls] == ["get_weather"]


def test_two_calls_each_get_their_own_id_in_order():
    text, _, calls = run(f"{XML_CALL}\n{XML_CALL_2}\n")
    assert text == ""
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert args(calls[1]) == {"zone": "Europe/Paris"}
    assert len({c.id for c in calls}) == 2


def test_reasoning_then_call_in_the_qwen_shape():
    answer = f"The user wants the weather.\n</think>\n\n{XML_CALL}"
    text, thinking, calls = run(answer, in_thinking=True)
    assert thinking.strip() == "The user wants the weather." and text == ""
    assert [c.name for c in calls] == ["get_weather"]


@pytest.mark.parametrize("cut", [len("<tool_call>\n<function=get_wea"), len(XML_CALL) - 5, 11, 3])
def test_a_call_cut_off_by_max_tokens_comes_back_as_content(cut):
    answer = "Checking. " + XML_CALL[:cut]
    text, _, calls = run(answer)
    assert calls == []
    assert text == "Checking. " + XML_CALL[:cut]  # nothing lost, nothing added


@pytest.mark.parametrize("body", [
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_weather>\nParis\n</function>\n</tool_call>",
    "<tool_call>\nget_weather(Paris)\n</tool_call>",
])
def test_malformed_xml_comes_back_as_content(body):
    text, _, calls = run(f"Sure. {body}")
    assert calls == [] and text == f"Sure. {body}"


@pytest.mark.parametrize("body", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>',
    '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>',
    "<tool_call>\nnot json\n</tool_call>",
])
def test_malformed_json_comes_back_as_content(body):
    text, _, calls = run(body, "json")
    assert calls == [] and text == body


def test_a_good_call_after_a_malformed_one_is_still_a_call():
    bad = "<tool_call>\nnot json\n</tool_call>"
    text, _, calls = run(f"{bad}\n{JSON_CALL}", "json")
    assert text == bad and [c.name for c in calls] == ["get_weather"]


def test_xml_values_follow_the_parameter_types():
    call = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
            "<parameter=hourly>\ntrue\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n"
            "</parameter>\n<parameter=days>\nsoon\n</parameter>\n<parameter=extra>\n7\n"
            "</parameter>\n</function>\n</tool_call>")
    _, _, calls = run(call)
    # a string stays a string even when it looks like a number; a value that is not JSON stays
    # text; an unknown parameter stays text
    assert args(calls[0]) == {"city": "42", "hourly": True, "tags": ["a", "b"], "days": "soon",
                              "extra": "7"}


def test_multiline_string_values_keep_their_lines():
    call = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nline one\nline two\n"
            "</parameter>\n</function>\n</tool_call>")
    _, _, calls = run(call)
    assert args(calls[0]) == {"city": "line one\nline two"}


def test_the_json_form_is_read_from_an_xml_template_too():
    _, _, calls = run(JSON_CALL, "xml")
    assert [c.name for c in calls] == ["get_weather"]


def test_plain_answers_pass_through_unchanged():
    answer = "Use <b>bold</b> text, and a < b when x <tool is fine."
    text, _, calls = run(answer)
    assert text == answer and calls == []


def test_logprobs_follow_the_text_not_the_call():
    stream = AnswerStream(in_thinking=True, parser=ToolCallParser("xml", TOOLS))
    tokens = ["Hmm", "</think>", "\n\n", "Let", " me", " check", ".\n", *pieces(XML_CALL)]
    got = []
    for i, tok in enumerate(tokens):
        piece = stream.feed(tok, TokenLogprob(token=tok, logprob=-float(i), bytes=tuple(tok.encode())))
        got.append(piece)
    last = stream.flush()
    text = "".join(p.text for p in got) + last.text
    lps = [lp.token for p in got for lp in p.logprobs] + [lp.token for lp in last.logprobs]
    assert text == "Let me check."
    assert lps == ["\n\n", "Let", " me", " check", ".\n"]  # no reasoning, no call text
    assert [c.name for p in got for c in p.calls] == ["get_weather"]


def test_call_format_is_read_from_the_template():
    from support.tinyqwen35 import QWEN35_TOOLS_TEMPLATE
    assert call_format(QWEN35_TOOLS_TEMPLATE) == "xml"
    assert call_format("{% for m in messages %}<tool_call>{{ m | tojson }}</tool_call>{% endfor %}") == "json"
    assert call_format("{{ messages }}") == "json"


def test_the_fallback_lists_the_tools_and_wraps_results():
    history = [Message("system", "Be brief."), Message("user", "Weather in Paris?"),
               Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
               Message("tool", "sunny", tool_call_id="call_1"),
               Message("tool", "22 C", tool_call_id="call_1")]
    dicts = template_messages(history, TOOLS, aware=False)
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "user"]
    assert dicts[0]["content"].startswith("Be brief.\n\n# Tools")
    assert json.dumps(WEATHER) in dicts[0]["content"] and "<tool_call>" in dicts[0]["content"]
    assert dicts[2]["content"] == ('<tool_call>\n{"name": "get_weather", "arguments": '
                                   '{"city": "Paris"}}\n</tool_call>')
    assert dicts[3]["content"] == ("<tool_response>\nsunny\n</tool_response>\n"
                                   "<tool_response>\n22 C\n</tool_response>")
    no_tools = template_messages(history, (), aware=False)
    assert "# Tools" not in no_tools[0]["content"]  # tool_choice "none": no tools shown


def test_a_tool_aware_template_gets_arguments_as_objects():
    history = [Message("user", "Weather?"),
               Message("assistant", "", reasoning="need data",
                       tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
               Message("tool", "sunny", tool_call_id="call_1", name="get_weather")]
    dicts = template_messages(history, TOOLS, aware=True)
    assert dicts[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert dicts[1]["reasoning_content"] == "need data"
    assert dicts[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1",
                        "name": "get_weather"}


def test_a_token_holding_part_of_a_character_keeps_its_logprob():
    """Byte-fallback tokens (emoji, Korean) decode to no text until the character is complete:
    each token still has its logprob, released with the character's text."""
    from pocketchat.engines.answer.stream import AnswerStream
    from pocketchat.engines.types import TokenLogprob

    stream = AnswerStream(in_thinking=False)
    first = TokenLogprob(token="\\xed", logprob=-0.5, bytes=(0xED,))
    second = TokenLogprob(token="\\x95\\x9c", logprob=-0.25, bytes=(0x95, 0x9C))
    end = TokenLogprob(token="", logprob=-0.1, bytes=())  # end of turn: no bytes, no entry
    assert stream.feed("", first).logprobs == ()
    piece = stream.feed("한", second)
    assert piece.text == "한" and piece.logprobs == (first, second)
    assert stream.feed("", end).logprobs == () and stream.flush().logprobs == ()
