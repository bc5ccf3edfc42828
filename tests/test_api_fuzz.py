"""The Python API's arguments, any value (hypothesis): each call gives a clear error
(`ApiError`, or the engine's `UnsupportedRequest` naming the part) or an answer, never another
exception, and the next call on the same session works."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pocketchat  # noqa: E402
from pocketchat.engines.types import ChatOptions, Message  # noqa: E402
from pocketchat.errors import ApiError, UnsupportedRequest  # noqa: E402

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "Say hi."}]
MAX_TOKENS = 3

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.binary(max_size=4))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3)),
    max_leaves=8)
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool",
                                                    "developer", "wizard"])},
                          optional={"content": st.one_of(st.text(max_size=20), values),
                                    "tool_call_id": values, "tool_calls": values,
                                    "name": values}),
    st.builds(Message, st.sampled_from(["user", "assistant", "system", "tool"]), st.text(max_size=20)),
    values)
messages = st.one_of(st.lists(message, max_size=3), values, st.just(HI))
KEYS = ("tools", "tool_choice", "parallel_tool_calls", "response_format", "thinking",
        "max_tokens", "temperature", "top_p", "seed", "logprobs")
keywords = st.fixed_dictionaries({}, optional={
    **{k: values for k in KEYS},
    "response_format": st.one_of(values, st.fixed_dictionaries({
        "type": st.sampled_from(["text", "json_object", "json_schema"]),
        "json_schema": st.fixed_dictionaries({}, optional={"schema": values, "name": values})})),
    "options": st.one_of(values, st.builds(ChatOptions, temperature=st.one_of(
        st.none(), st.floats(allow_nan=True)), top_k=st.one_of(st.none(), st.integers(-5, 50)),
        logprobs=st.one_of(st.none(), st.integers(-3, 30)))),
})


@pytest.fixture(scope="module")
def session():
    pytest.importorskip("llama_cpp")
    with pocketchat.load("starter", ctx=512) as s:
        yield s


def _short(kw: dict) -> dict:
    """Answers kept short so the run is bounded: a valid length above MAX_TOKENS is lowered."""
    value = kw.get("max_tokens")
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS):
        kw["max_tokens"] = MAX_TOKENS
    return kw


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(msgs=messages, kw=keywords)
def test_any_arguments_give_a_clear_error_or_an_answer_and_the_next_call_works(session, msgs, kw):
    kw = _short(dict(kw))
    try:
        result = session.chat(msgs, **kw)
        assert result.finish_reason in ("stop", "length", "tool_calls")
    except (ApiError, UnsupportedRequest) as exc:
        assert exc.message and "object at 0x" not in exc.message
    again = session.chat(HI, max_tokens=2, temperature=0)
    assert again.finish_reason in ("stop", "length")


@settings(max_examples=25, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(prompt=st.one_of(st.text(max_size=20), values), max_tokens=values, logprobs=values)
def test_complete_takes_any_arguments_the_same_way(session, prompt, max_tokens, logprobs):
    kw = _short({"max_tokens": max_tokens, "logprobs": logprobs})
    try:
        session.complete(prompt, **kw)
    except (ApiError, UnsupportedRequest) as exc:
        assert exc.message
    assert session.complete("The", max_tokens=2, temperature=0).finish_reason in ("stop", "length")
