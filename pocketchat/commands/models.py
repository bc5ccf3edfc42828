"""`pocketchat models`: what is on disk; `pocketchat models rm MODEL`: remove one."""

from __future__ import annotations

import argparse
import json

from pocketchat.commands.download import human_bytes
from pocketchat.textsafe import visible


def configure(p: argparse.ArgumentParser) -> None:
    p.description = "List the models on disk (the Hugging Face cache), or remove one."
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    rm = sub.add_parser("rm", help="remove a model from disk", description="Remove models from disk.")
    rm.add_argument("names", nargs="+", metavar="MODEL",
                    help="a build id, REPO:QUANT, REPO/FILE or a path as `pocketchat models` lists it")


def run(args: argparse.Namespace) -> int:
    from pocketchat.paths import settings
    from pocketchat.store import inventory, api as store

    if getattr(args, "action", None) == "rm":
        for name in args.names:
            removed = store.remove(name)
            print(visible(f"removed {name}: " + ", ".join(str(p) for p in removed)))
        return 0
    models = store.list_models()
    partials = inventory.partials()
    if args.json:
        print(json.dumps({
            "cache_dir": str(settings().hf_cache_dir),
            "models": [{"name": m.name, "build": m.build_id, "repo_id": m.repo_id, "filename": m.filename,
                        "format": m.format, "size_bytes": m.size_bytes, "path": str(m.path),
                        "verified": m.verified, "commit": m.commit} for m in models],
            "partial": [{"repo_id": i["repo_id"], "filename": i["path"], "bytes_done": i["bytes_done"],
                         "size_bytes": i["size"]} for i in partials],
        }, indent=2))
        return 0
    if not models and not partials:
        print(f"No models on disk yet (looked in {settings().hf_cache_dir}).\n"
              "Get the one that fits this machine with `pocketchat download`.")
        return 0
    rows = [(m.name, human_bytes(m.size_bytes), "verified" if m.verified else "not checked", str(m.path))
            for m in models]
    if rows:
        widths = [max(len(r[i]) for r in rows + [("MODEL", "SIZE", "CHECKSUM", "PATH")]) for i in range(3)]
        for r in [("MODEL", "SIZE", "CHECKSUM", "PATH"), *rows]:
            print(visible("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=False)) + "  " + r[3]))
    for i in partials:
        size = i["size"] or 0
        pct = f"{100 * i['bytes_done'] / size:.0f}%" if size else "?"
        build = inventory.build_for(i["repo_id"], i["path"], "gguf")
        spec = build.id if build else f"{i['repo_id']}/{i['path']}"
        print(visible(f"partial: {i['repo_id']}/{i['path']}  {human_bytes(i['bytes_done'], like=size)} of "
                      f"{human_bytes(size)} ({pct}); `pocketchat download {spec}` resumes it"))
    return 0
