"""`serve --stream-interval MS`: how often a streamed answer's events come, and that the pace
groups the text differently but never changes it."""

from __future__ import annotations

from typing import Any

import pytest

from support.serverproc import running

TOKENS = 24


def _stream(srv: Any) -> list[str]:
    """The content of each event of one streamed answer of TOKENS tokens."""
    client = srv.openai()
    events = client.chat.completions.create(
        model="starter", messages=[{"role": "user", "content": "Count from one to fifty."}],
        max_tokens=TOKENS, stream=True, seed=1, temperature=0, extra_body={"ignore_eos": True})
    return [ev.choices[0].delta.content for ev in events
            if ev.choices and ev.choices[0].delta.content]


@pytest.mark.slow
def test_the_stream_interval_sets_how_often_events_come_and_keeps_the_text(tmp_path):
    args = ["--model", "starter", "--ctx", "512", "--parallel", "1"]
    streams = {}
    for pace in ("0", "1000"):
        home = tmp_path / pace
        home.mkdir()
        with running([*args, "--stream-interval", pace], home) as srv:
            streams[pace] = _stream(srv)
    each, grouped = streams["0"], streams["1000"]
    assert "".join(each) == "".join(grouped) != ""
    assert len(each) >= TOKENS - 2, each  # a token of a partial character waits for the next
    # the first token goes at once; the other 23 are decoded well within a second of it
    assert len(grouped) <= 2, grouped


def test_a_stream_interval_out_of_range_is_refused_with_the_range(capsys):
    from pocketchat import cli

    code = cli.main(["serve", "--offline", "--stream-interval", "-5"])
    err = capsys.readouterr().err
    assert code != 0 and "--stream-interval must be between 0 and 1000 ms, got -5" in err
