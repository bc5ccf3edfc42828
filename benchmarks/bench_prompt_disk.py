"""An agent's long prompt after a restart: the prompt cache's disk tier at full size.

Run (under the exclusive lock, one full-size model at a time):
    env PYTHONPATH=. .venv/bin/python benchmarks/bench_prompt_disk.py \
        --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf [--repeat 2] [--threads 2]

A coding agent's first request (system instructions and tool schemas, as Claude Code's: no
recording of its text is in this repository, so a synthetic one of that kind, `--repeat` blocks
long) sent to a freshly started engine twice, each in its own process (after a first process
that only loads the model, so both find its pages in the page cache) (the engine `pocketchat
serve` runs, with its disk tier wired as `tests/support/prompt_disk_run.py` says): cold (an
empty cache folder), then after the restart. Prints each run's prompt tokens, tokens
evaluated, time to first token and load time, and the disk tier's bytes, write time (the
writer thread's, off the request path) and read time.
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

INSTRUCTIONS = (
    "You are an interactive command line tool that helps users with software engineering "
    "tasks. Use the instructions below and the tools available to you to assist the user. "
    "Be concise, direct and to the point. When you run a non-trivial bash command, explain "
    "what it does and why. Never commit changes unless the user asks. Follow the conventions "
    "of the code you read: look at neighbouring files, tests and configuration first. ")


def tool(i: int) -> str:
    schema = {"name": f"Tool{i}", "description": f"Reads, edits or searches file number {i} of "
              "the project; returns its output as text.",
              "input_schema": {"type": "object", "properties": {
                  "path": {"type": "string", "description": "The absolute path to work on"},
                  "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
                  "mode": {"type": "string", "enum": ["read", "write", "append"]}},
                  "required": ["path"]}}
    return json.dumps(schema)


def system_prompt(repeat: int) -> str:
    parts = []
    for i in range(repeat):
        parts.append(INSTRUCTIONS)
        parts.extend(tool(4 * i + k) for k in range(4))
    return "\n".join(parts)


def lifetime(model: Path, disk_bytes: int, system: Path, threads: int, n_ctx: int,
             env: dict) -> dict:
    run = subprocess.run([sys.executable, "-m", "support.prompt_disk_run", str(model),
                          str(disk_bytes), str(system), "List the files you would read first.",
                          str(n_ctx), str(threads)], cwd=TESTS, env=env, capture_output=True,
                         text=True, timeout=1800)
    if run.returncode != 0:
        raise SystemExit(run.stderr[-3000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=2, help="instruction+4-tool blocks")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--disk-mb", type=int, default=2048)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "POCKETCHAT_CACHE_DIR": str(Path(tmp) / "cache"),
               "POCKETCHAT_DATA_DIR": str(Path(tmp) / "data"),
               "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}"}
        system = Path(tmp) / "system.txt"
        system.write_text(system_prompt(args.repeat))
        warm_up = Path(tmp) / "short.txt"
        warm_up.write_text("Be brief.")  # the model's pages in the page cache, disk tier off:
        lifetime(args.model, 0, warm_up, args.threads, args.ctx, env)  # no disk read timed below
        runs = {}
        for label in ("cold", "after restart"):
            runs[label] = r = lifetime(args.model, args.disk_mb * 1024**2, system, args.threads,
                                       args.ctx, env)
            print(f"{label:>14}: prompt {r['prompt_length']} tokens, reused {r['reused']}, "
                  f"evaluated {r['evaluated']}, time to first token {r['ttft']:.1f} s "
                  f"(load {r['load_seconds']:.1f} s, close {r['close_seconds']:.1f} s)",
                  flush=True)
        cold, warm = runs["cold"]["status"]["disk"], runs["after restart"]["status"]["disk"]
        prefix = runs["after restart"]["reused"]
        print(f"disk tier: {cold['entries']} entry, {cold['bytes'] / 1024**2:.1f} MB "
              f"({cold['bytes'] / max(prefix, 1) / 1024:.1f} KB per token of the {prefix}-token "
              f"prefix), written in "
              f"{cold['write_seconds']:.2f} s (writer thread); read back in "
              f"{warm['read_seconds']:.2f} s; hits after restart {warm['hits']}")
        c, w = runs["cold"]["ttft"], runs["after restart"]["ttft"]
        print(f"time to first token: {c:.1f} s cold, {w:.1f} s after restart ({c / w:.1f}x); "
              f"answers equal: {runs['cold']['answer'] == runs['after restart']['answer']}")


if __name__ == "__main__":
    main()
