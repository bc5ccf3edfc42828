"""`pocketchat --probe` and `pocketchat --recommend`: what this machine has, and what fits it."""

from __future__ import annotations

import argparse
import json

from pocketchat.choose.model import recommend
from pocketchat.choose.selection import Selection
from pocketchat.commands.think import recommendation_budget
from pocketchat.textsafe import visible


def configure(p: argparse.ArgumentParser) -> None:
    """The root parser already has --probe, --recommend, --json and the selection flags."""


def run(args: argparse.Namespace) -> int:
    from pocketchat.select import report

    sel = Selection.from_args(args)
    profile = sel.profile(kernels=True)
    if args.probe and not args.recommend:
        print(json.dumps(profile.to_json(), indent=2) if args.json else visible(report.format_profile(profile)))
        return 0
    if sel.rpc:
        return _run_pooled(args, sel, profile)
    rec = recommend(sel, profile)
    if args.json:
        body = rec.to_json()
        budget = recommendation_budget(rec)
        body["thinking_budget"] = ({"tokens": budget.tokens, "why": budget.why}
                                   if budget is not None else None)
        print(json.dumps(body, indent=2))
    else:
        if args.probe:
            print(visible(report.format_profile(profile)) + "\n")
        print(visible(report.format_recommendation(rec)))
    if rec.recommended is None:
        # The table above already says why; the error line gives the figures in one sentence.
        raise report.nothing_fits(rec)
    return 0


def _run_pooled(args: argparse.Namespace, sel: Selection, profile) -> int:
    """`--recommend --rpc`: the best build alone vs pooled, and whether pooling pays."""
    from pocketchat.choose.pooling import advice, helpers_for
    from pocketchat.select import pool, report

    adv = advice(sel, profile, helpers_for(sel))
    if args.json:
        print(json.dumps(pool.advice_json(adv), indent=2))
    else:
        if args.probe:
            print(visible(report.format_profile(profile)) + "\n")
        print(visible(pool.format_advice(adv)))
    return 0
