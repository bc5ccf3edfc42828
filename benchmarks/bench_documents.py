"""A document in the chat at full size: read while the question is typed, and read once per machine.

Run (one full-size model at a time; the synthetic file from `benchmarks/pocket_scale.py
--write-only --out PATH`):
    env PYTHONPATH=. .venv/bin/python benchmarks/bench_documents.py \
        --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf [--chars 16000] [--ahead 20] [--threads 2]

A document of about `--chars` characters (~4,000 tokens) and a question about it, each run in
its own process (after a first that only loads the model, so every run finds its pages in the
page cache), through `tests/support/documents_run.py` (the engine the chat and `serve` run,
with its disk tier):
1. pasted: the document's text pasted before the question (no attachment), a fresh cache;
2. attached `--ahead` seconds before Enter: the read-ahead starts when the file is attached,
   Enter comes `--ahead` s later (stopping a read-ahead still going; the answer reads the rest);
3. after a restart: the same file with another question, in a new process (the disk tier).
Prints, for each, the prompt's tokens, those evaluated after Enter, and the time from Enter to
the first answer token; then what the read-ahead hid and what the restart saved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PARAGRAPH = ("Clause {i}. The tenant keeps the garden at number {i} tidy, pays the water bill "
             "by the {d}th of each month, and may keep one cat but no dog. Repairs over {e} "
             "euros are agreed in writing with the landlord before work starts.\n\n")


def document(chars: int) -> str:
    parts, i = [], 1
    while sum(map(len, parts)) < chars:
        parts.append(PARAGRAPH.format(i=i, d=(i % 27) + 1, e=50 * i))
        i += 1
    return "".join(parts)


def lifetime(model: Path, doc: Path, question: str, mode: str, args: argparse.Namespace,
             env: dict, disk_mb: int) -> dict:
    run = subprocess.run([sys.executable, "-m", "support.documents_run", str(model),
                          str(disk_mb * 1024**2), str(doc), question, str(args.ctx), mode,
                          str(args.threads)], cwd=TESTS, env=env, capture_output=True, text=True,
                         timeout=3600)
    if run.returncode != 0:
        raise SystemExit(run.stderr[-3000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--chars", type=int, default=16000, help="the document's length")
    ap.add_argument("--ahead", type=float, default=20.0, help="seconds between attach and Enter")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--disk-mb", type=int, default=2048)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        def env_for(name: str) -> dict:
            return {**os.environ, "POCKETCHAT_CACHE_DIR": str(Path(tmp) / name / "cache"),
                    "POCKETCHAT_DATA_DIR": str(Path(tmp) / name / "data"),
                    "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}"}

        doc = Path(tmp) / "lease.md"
        doc.write_text(document(args.chars))
        short = Path(tmp) / "short.md"
        short.write_text("Clause 1. The tenant keeps the garden tidy.")
        lifetime(args.model, short, "Who keeps the garden?", "attach", args, env_for("warm"), 0)
        asked = "Which clause says the tenant may keep a cat, and is a dog allowed?"
        runs = {
            "pasted": lifetime(args.model, doc, asked, "paste", args, env_for("paste"),
                               args.disk_mb),
            f"attached {args.ahead:.0f} s before Enter": lifetime(
                args.model, doc, asked, f"ahead:{args.ahead}", args, env_for("ahead"),
                args.disk_mb),
            "after a restart": lifetime(args.model, doc, "By which day is the water bill paid?",
                                        "attach", args, env_for("ahead"), args.disk_mb),
        }
        for label, r in runs.items():
            extra = (f"; read ahead {r['ahead_tokens']} tokens in {r['ahead_seconds']:.1f} s "
                     f"({r['ahead_finish']})" if r["ahead_finish"] else "")
            print(f"{label:>28}: prompt {r['prompt_length']} tokens, evaluated after Enter "
                  f"{r['evaluated']} ({r['prompt_tok_s']:.1f} tok/s), Enter to first token "
                  f"{r['ttft']:.1f} s (load {r['load_seconds']:.1f} s){extra}", flush=True)
        pasted, ahead, again = runs.values()
        print(f"read-ahead hid {pasted['ttft'] - ahead['ttft']:.1f} s of {args.ahead:.0f} s "
              f"typing; after a restart {again['ttft']:.1f} s against {pasted['ttft']:.1f} s "
              f"pasted ({pasted['ttft'] / max(again['ttft'], 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
