"""An error never leaves state behind, on the real starter (slow lane): the issue's case, an
unsupported JSON schema, raised by the API through the worker and in process, and the same
session answers next (the fast lane drives every failure: tests/test_engine_errors.py)."""

from __future__ import annotations

import pytest

import pocketchat
from pocketchat.errors import UnsupportedRequest

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "Say hello."}]
FOO = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}


@pytest.mark.parametrize("in_process", [False, True], ids=["worker", "in-process"])
def test_an_unsupported_schema_leaves_the_session_ready(in_process):
    pytest.importorskip("llama_cpp")
    with pocketchat.load("starter", ctx=1024, in_process=in_process) as session:
        with pytest.raises(UnsupportedRequest, match="Invalid type: foo") as info:
            session.chat(HI, response_format=FOO)
        assert info.value.param == "response_format.json_schema.schema"
        with pytest.raises(UnsupportedRequest):  # streamed: the same error, the same rule
            list(session.chat(HI, response_format=FOO, stream=True))
        # The caller still holds the exception (a REPL keeps the last one): the model answers.
        result = session.chat(HI, max_tokens=4, temperature=0)
        assert result.finish_reason in ("stop", "length") and result.text
        assert session.complete("The sky is", max_tokens=3).stats.generated_tokens > 0
        assert session.engine.status()["cache"] is not None
