"""The thinking setting: `--think off|on|N|unlimited` (one parser, one error), the default
budget from the decode speed (a pure function, and on hand-made machines), and where it is
shown (`--recommend`, `inspect`)."""

from __future__ import annotations

import pytest

from pocketchat.commands.think import recommendation_budget, think_of
from pocketchat.errors import UsageError
from pocketchat.select import catalog, fit
from pocketchat.select.profile import load_profile
from pocketchat.select.thinking import (MAX_BUDGET, MIN_BUDGET, THINK_SECONDS, UNKNOWN_SPEED_BUDGET,
                                        Think, default_budget, parse_think)

from support import PROFILES

GOOD = [
    ("off", Think(on=False, default=False)), ("OFF", Think(on=False, default=False)),
    ("0", Think(on=False, default=False)), ("no", Think(on=False, default=False)),
    ("on", Think()), ("true", Think()),
    ("unlimited", Think(default=False)),
    ("512", Think(budget=512, default=False)), ("1,024", Think(budget=1024, default=False)),
    (" 64 ", Think(budget=64, default=False)),
]


@pytest.mark.parametrize("text,expected", GOOD, ids=[g[0].strip() or "blank" for g in GOOD])
def test_think_values(text, expected):
    assert parse_think(text) == expected


@pytest.mark.parametrize("text", ["-5", "lots", "12.5", "", "5k", "2000000"])
def test_a_bad_think_value_says_the_choices(text):
    with pytest.raises(UsageError) as err:
        parse_think(text)
    assert "--think" in err.value.message
    assert "--think" in (err.value.hint or "")


def test_what_each_setting_resolves_to():
    assert Think(on=False, default=False).resolved(700) == (False, None)
    assert Think().resolved(700) == (True, 700)  # on: the machine's default budget
    assert Think(budget=64, default=False).resolved(700) == (True, 64)
    assert Think(default=False).resolved(700) == (True, None)  # unlimited


# decode tok/s -> the default budget (about a minute, multiples of 64, within the bounds)
SPEEDS = [
    (None, UNKNOWN_SPEED_BUDGET), (0.0, UNKNOWN_SPEED_BUDGET), (float("nan"), UNKNOWN_SPEED_BUDGET),
    (0.5, MIN_BUDGET), (2.0, 128), (5.0, 320), (10.0, 576), (19.5, 1152), (30.0, 1792),
    (100.0, 6016), (176.0, MAX_BUDGET), (1000.0, MAX_BUDGET),
]


@pytest.mark.parametrize("tok_s,tokens", SPEEDS, ids=[str(s) for s, _ in SPEEDS])
def test_default_budget_is_about_a_minute_of_thinking(tok_s, tokens):
    budget = default_budget(tok_s, "measured")
    assert budget.tokens == tokens
    assert budget.tokens % 64 == 0
    if tok_s and tok_s == tok_s and MIN_BUDGET < tokens < MAX_BUDGET:
        assert abs(tokens / tok_s - THINK_SECONDS) < 64 / tok_s  # a minute, to one step
        assert "measured" in budget.why and "of thinking" in budget.why
    line = budget.line()
    assert line.startswith(f"thinking budget: {tokens:,} tokens by default (") and "--think" in line


MACHINES = ["linux-2core-compute-bound", "linux-2core-bandwidth-bound", "laptop-8gb", "linux-20gb",
            "mac-m3pro-18gb", "mac-m3max-36gb", "linux-12gb-nvidia-32gb", "linux-h100-80gb"]


def test_default_budget_on_hand_made_machines_follows_their_speed():
    seen = []
    for name in MACHINES:
        rec = fit.plan(load_profile(PROFILES / f"{name}.json"), catalog.builds())
        budget = recommendation_budget(rec)
        assert budget is not None, name
        speed = rec.recommended.estimated_decode_tok_s
        seconds = budget.tokens / speed
        assert 50 <= seconds <= 70 or budget.tokens in (MIN_BUDGET, MAX_BUDGET), (name, budget)
        seen.append((speed, budget.tokens))
    ordered = sorted(seen)
    assert [t for _, t in ordered] == sorted(t for _, t in ordered)  # faster: a larger budget
    assert dict(seen)[max(s for s, _ in seen)] == MAX_BUDGET  # the H100 hits the cap
    assert recommendation_budget(fit.plan(load_profile(PROFILES / "board-4gb.json"),
                                          catalog.builds())) is None  # nothing fits


def test_recommend_shows_the_budget_and_why():
    from pocketchat.select.report import format_recommendation

    rec = fit.plan(load_profile(PROFILES / "linux-20gb.json"), catalog.builds())
    text = format_recommendation(rec)
    expected = recommendation_budget(rec)
    assert f"thinking budget: {expected.tokens:,} tokens by default (about" in text
    assert "tok/s, estimate; --think N or off changes it)" in text


def _parse(argv):
    from pocketchat.cli import _root_parser

    return _root_parser().parse_args(argv)


def _sub(name, argv):
    from pocketchat.cli import SUBCOMMANDS, Parser, _load

    p = Parser(prog=f"pocketchat {name}")
    _load(SUBCOMMANDS[name]).configure(p)
    return p.parse_args(argv)


def test_think_flag_on_the_chat_and_p_and_no_think_as_its_hidden_alias(capsys):
    assert think_of(_parse([])) == Think()
    assert think_of(_parse(["--think", "64", "-p", "hi"])) == Think(budget=64, default=False)
    assert think_of(_parse(["--no-think"])) == Think(on=False, default=False)
    from pocketchat.cli import _root_parser

    text = _root_parser().format_help()
    assert "--think off|on|N|unlimited" in text and "--no-think" not in text


@pytest.mark.parametrize("command", ["serve", "bench"])
def test_think_flag_on_serve_and_bench(command):
    assert think_of(_sub(command, ["--think", "off"])) == Think(on=False, default=False)
    assert think_of(_sub(command, ["--think", "300"])) == Think(budget=300, default=False)
    assert think_of(_sub(command, ["--no-think"])) == Think(on=False, default=False)


@pytest.mark.parametrize("argv", [["--think", "lots"], ["serve", "--think", "-1"],
                                  ["bench", "--think", "fast"]])
def test_a_bad_think_value_is_one_clear_error(argv, capsys):
    from pocketchat.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "argument --think: --think takes off, on, unlimited or a number of tokens" in lines[0]
    assert "Traceback" not in err
