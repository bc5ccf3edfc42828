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
    (tmp_path / "each").mkdir(), (tmp_path / "second").mkdir()
    with running([*args, "--stream-interval", "0"], tmp_path / "each") as srv:
        each = _stream(srv)
    with running([*args, "--stream-interval", "1000"], tmp_path / "second") as srv:
        grouped = _stream(srv)
    assert "".join(each) == "".join(grouped) != ""
    assert len(each) >= TOKENS - 2, each  # a token of a partial character waits for the next
    # the first token goes at once; the other 23 are decoded well within a second of it
    assert len(grouped) <= 2, grouped


def test_a_stream_interval_out_of_range_is_refused_with_the_range(capsys):
    from pocketchat import cli

    code = cli.main(["serve", "--offline", "--stream-interval", "-5"])
    err = capsys.readouterr().err
    assert code != 0 and "--stream-interval must be between 0 and 1000 ms, got -5" in err
