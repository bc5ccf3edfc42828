"""`pocketchat --probe` and `pocketchat --recommend`: what this machine has, and what fits it."""

from __future__ import annotations

import argparse
import json

from pocketchat.errors import NothingFits
from pocketchat.types import HardwareProfile, Recommendation
from pocketchat.textsafe import visible


def configure(p: argparse.ArgumentParser) -> None:
    """The root parser already has --probe, --recommend, --json and the selection flags."""


def profile_from_args(args: argparse.Namespace) -> HardwareProfile:
    """The replayed profile (--hardware FILE) or a fresh probe."""
    if getattr(args, "hardware", None):
        from pocketchat.select.profile import load_profile

        return load_profile(args.hardware)
    from pocketchat.select.probe import detect

    return detect()


def recommend(args: argparse.Namespace, profile: HardwareProfile | None = None) -> Recommendation:
    """Rank the catalog for this machine (or the replayed one), knowing what is on disk."""
    from pocketchat.select import catalog, fit

    profile = profile or profile_from_args(args)
    downloaded: set[str] = set()
    if not getattr(args, "hardware", None):
        try:
            from pocketchat.store.api import downloaded_build_ids

            downloaded = set(downloaded_build_ids())
        except ImportError:
            pass
    return fit.plan(profile, catalog.builds(), lang=args.lang, n_ctx=args.ctx,
                    backend=args.backend, downloaded=downloaded)


def run(args: argparse.Namespace) -> int:
    from pocketchat.select import report

    profile = profile_from_args(args)
    if args.probe and not args.recommend:
        print(json.dumps(profile.to_json(), indent=2) if args.json else visible(report.format_profile(profile)))
        return 0
    rec = recommend(args, profile)
    if args.json:
        print(json.dumps(rec.to_json(), indent=2))
    else:
        if args.probe:
            print(visible(report.format_profile(profile)) + "\n")
        print(visible(report.format_recommendation(rec)))
    if rec.recommended is None:
        # The table above already says why; the error line gives the figures in one sentence.
        raise NothingFits(report.nothing_fits_summary(rec),
                          hint="Close other programs, try a smaller --ctx, or use --model starter "
                               "to chat with the small embedded model.")
    return 0
