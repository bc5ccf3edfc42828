"""`pocketchat web`: `serve` on this machine, and the web chat opened in the browser once the
model is ready (`--no-browser`: only say its address). Every `serve` option applies."""

from __future__ import annotations

import argparse

from pocketchat.commands import serve


def configure(p: argparse.ArgumentParser) -> None:
    serve.configure(p)
    p.description = ("Serve the chosen model and open its web chat in the browser (the same "
                     "server as `pocketchat serve`: its API answers at /v1 too).")
    p.add_argument("--no-browser", action="store_true",
                   help="do not open the browser; only print the web chat's address")


def run(args: argparse.Namespace) -> int:
    args.open_browser = not args.no_browser
    return serve.run(args)
