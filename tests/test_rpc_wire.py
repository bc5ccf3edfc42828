"""The RPC client's own checks, against real sockets on 127.0.0.1 (no llama.cpp needed): the
pooled engine decorator names a helper that went away, and a helper that is not one says so."""

from __future__ import annotations

import socket

import pytest

from scripted_engine import Reply, ScriptedEngine
from pocketchat.engines.pooled import PooledEngine, open_pooled
from pocketchat.engines.types import Message
from pocketchat.errors import EngineCrashed, HelperGone, HelperUnreachable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_pooled_decorator_names_the_helper_that_went_away():
    gone = f"127.0.0.1:{free_port()}"  # nothing listens there any more
    inner = ScriptedEngine([Reply("one two three four five", crash_after=2)])
    engine = PooledEngine(inner, [gone])
    seen = []
    with pytest.raises(HelperGone) as err:
        for chunk in engine.chat([Message("user", "Hi")]):
            seen.append(chunk.text)
    assert seen == ["one", " two"]  # what came before the crash came through
    assert err.value.endpoint == gone and f"the helper at {gone} went away" in err.value.message
    assert engine.gone == gone  # the chat's Ctrl+R reloads without it
    assert isinstance(err.value.__cause__, EngineCrashed) and err.value.exitcode == -9
    assert engine.info is inner.info
    engine.close()
    assert inner.closed


def test_an_unreachable_helper_stops_the_pooled_engine_before_it_loads():
    gone = f"127.0.0.1:{free_port()}"
    opened = []
    with pytest.raises(HelperUnreachable) as err:
        open_pooled([gone], lambda: opened.append(1) or ScriptedEngine())
    assert opened == [] and err.value.endpoint == gone
    assert "nothing listens there" in err.value.message
