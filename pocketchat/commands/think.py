"""`--think off|on|N|unlimited` for the chat, `-p`, `bench` and `serve` (and `--no-think`, its
old spelling, hidden), and the default budget of the model a command runs on this machine."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pocketchat.select.thinking import CHOICES, OFF, ON, DefaultBudget, Think, default_budget, parse_think

if TYPE_CHECKING:
    from pocketchat.choose.model import ModelChoice
    from pocketchat.choose.selection import Selection
    from pocketchat.types import Candidate, Recommendation


def think_value(value: str) -> Think:
    """argparse's type for --think: one clear error (`error: argument --think: ...`)."""
    from pocketchat.errors import UsageError

    try:
        return parse_think(value)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}. {exc.hint or ''}".strip()) from None


def add_think_args(p: argparse.ArgumentParser, *, default_help: str = "on: about a minute of "
                   "thinking at this machine's speed (--recommend shows it)") -> None:
    """--think and its hidden alias --no-think (= --think off)."""
    p.add_argument("--think", type=think_value, default=None, metavar="off|on|N|unlimited",
                   help=f"the model's thinking: {CHOICES}; N: at most N tokens of thought, then "
                        f"the answer (default {default_help})")
    p.add_argument("--no-think", dest="no_think", action="store_true", help=argparse.SUPPRESS)


def think_of(args: argparse.Namespace) -> Think:
    """The --think the user gave (--no-think: off); ON when neither was given."""
    if getattr(args, "no_think", False):
        return OFF
    given = getattr(args, "think", None)
    return given if isinstance(given, Think) else ON


def candidate_budget(c: "Candidate | None") -> DefaultBudget:
    """The default budget at a judged build's decode speed (unknown: the fallback)."""
    if c is None:
        return default_budget(None)
    return default_budget(c.estimated_decode_tok_s, c.speed_source)


def recommendation_budget(rec: "Recommendation") -> DefaultBudget | None:
    """The recommended build's default budget; None when nothing fits."""
    return candidate_budget(rec.recommended) if rec.recommended is not None else None


def choice_budget(choice: "ModelChoice", sel: "Selection") -> DefaultBudget:
    """The default budget of the model a command runs: its decode speed as `--recommend`
    knows it (measured by `bench` here, else the estimate), the fallback when not known."""
    rec = choice.recommendation
    if rec is not None and choice.build is not None:
        for c in rec.candidates:
            if c.build.id == choice.build.id and c.estimated_decode_tok_s:
                return candidate_budget(c)
    try:
        tok_s, source = _estimate(choice, sel)
    except Exception:  # noqa: BLE001 - a budget never stops a command: the fallback then
        return default_budget(None)
    return default_budget(tok_s, source)


def _estimate(choice: "ModelChoice", sel: "Selection") -> tuple[float | None, str]:
    """(tok/s, its source) of a chosen model placed as planned, calibrated by this machine's
    `bench` runs, as `bench` records it."""
    from pocketchat.choose.model import gguf_facts
    from pocketchat.select import estimate as est
    from pocketchat.select import fit

    plan = choice.plan
    if plan.rpc_servers:
        return None, "estimate"
    build = choice.build
    if build is None:
        facts = gguf_facts(choice.path)
        if facts is None:
            return None, "estimate"
        build = est.build_from_facts(facts, choice.label)
    profile = sel.profile()
    speed = fit.estimate_speed(build, profile, plan.placement, plan.n_threads, plan.n_cpu_moe)
    speeds = sel.calibration(profile)
    if speeds is None:
        return speed.tok_s, "estimate"
    return speeds.speed(build, plan.placement, speed)


def resolve(think: Think, choice: "ModelChoice", sel: "Selection") -> tuple[bool, int | None]:
    """(thinking on, budget) for a command: the machine's default budget for plain "on"."""
    if not think.on or not think.default:
        return think.resolved(None)
    return think.resolved(choice_budget(choice, sel).tokens)
