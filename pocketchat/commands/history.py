"""`pocketchat history`: the saved conversations, newest first."""

from __future__ import annotations

import argparse
import json
import sys
import time

from pocketchat import conversations
from pocketchat.paths import settings
from pocketchat.textsafe import one_line, visible


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--limit", type=int, default=20, metavar="N",
                   help="show the N newest (default 20; 0 = all)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--show", metavar="ID", help="print one conversation")


def run(args: argparse.Namespace) -> int:
    if args.show:
        return _show(args.show, as_json=args.json)
    found, skipped = conversations.scan()
    for path, why in skipped:
        print(one_line(f"warning: skipped unreadable {path.name}: {why}"), file=sys.stderr)
    shown = found if args.limit <= 0 else found[: args.limit]
    if args.json:
        print(json.dumps([_summary(c) for c in shown], indent=1, ensure_ascii=False))
        return 0
    if not found:
        print(f"No saved conversations yet (they are kept in {settings().conversations_dir}).")
        return 0
    for c in shown:
        s = _summary(c)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s["updated"]))
        mark = "  (interrupted)" if s["interrupted"] else ""
        count = f"{s['prompts']:>3} prompt" + ("" if s["prompts"] == 1 else "s")
        print(f"{one_line(c.id)}  {when}  {count:<11}  {one_line(c.display_title)}{mark}")
    if len(found) > len(shown):
        print(f"... and {len(found) - len(shown)} older (use -n 0 to see all)")
    print("\nReopen the last one with `pocketchat --continue`.")
    return 0


def last_answer_interrupted(c: conversations.Conversation) -> bool:
    """Whether the chat's last answer was cut short (an earlier one that was is history)."""
    answers = [m for m in c.messages if m.role == "assistant"]
    return bool(answers and answers[-1].interrupted)


def _summary(c: conversations.Conversation) -> dict:
    return {
        "id": c.id,
        "title": c.title,
        "model": c.model,
        "created": c.created,
        "updated": c.updated or c.created,
        "prompts": sum(1 for m in c.messages if m.role == "user"),
        "interrupted": last_answer_interrupted(c),
        "path": str(c.path),
    }


def _show(ident: str, as_json: bool) -> int:
    from pocketchat.errors import UsageError

    try:
        c = conversations.load(ident)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"no readable conversation {ident!r}: {exc}",
                         hint="`pocketchat history` lists the saved ones.") from exc
    if as_json:
        print(json.dumps(c.to_json(), indent=1, ensure_ascii=False))
        return 0
    print(one_line(f"# {c.display_title}  ({c.model or 'unknown model'})"))
    if c.system:
        print(visible(f"[system] {c.system}"))
    for m in c.messages:
        mark = " [interrupted]" if m.interrupted else ""
        print(f"\n[{m.role}]{mark}\n{visible(m.content)}")
    return 0
