"""Tokens evaluated by conversations that take turns, with and without the prompt cache.

Run: PYTHONPATH=. python benchmarks/bench_prompt_cache.py [--rounds 6] [--model PATH]
Starts the real server twice (`pocketchat serve --prompt-cache-mb 0`, then the default budget)
on the tiny random-weight `qwen35moe` (POCKET's hybrid architecture; or `--model`), runs the
interleaved conversations of `tests/support/interleaved.py` through the `openai` client (three
conversations in turn, the first with a 1,000-token system prompt, then a fourth with the same
system prompt) and prints, for each: the prompt tokens evaluated (from `usage`) in round 1,
from round 2 on, by the fourth conversation, the time the run took, and /health's cache figures
(entries, bytes, bytes per entry: one parked state).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import interleaved, tinyqwen35  # noqa: E402
from support.serverproc import running  # noqa: E402


def one(gguf: Path, home: Path, rounds: int, extra: list[str]) -> dict:
    import openai

    with running(["--model", str(gguf), "--ctx", "4096", *extra], home) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0,
                               timeout=600)
        model = client.models.list().data[0].id
        started = time.perf_counter()
        rows = interleaved.run(client, model, rounds=rounds)
        seconds = time.perf_counter() - started
        deadline = time.monotonic() + 30
        while True:  # the figures are asked after each answer
            _, health = srv.get("/health")
            cache = health.get("cache", {})
            if cache.get("hits", 0) + cache.get("misses", 0) >= len(rows) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    *turns, fourth = rows
    return {"first": sum(r.evaluated for r in turns if r.round == 1),
            "later": sum(r.evaluated for r in turns if r.round > 1),
            "later_max_over_new": max((r.evaluated - r.new_tokens for r in turns if r.round > 1),
                                      default=0),
            "fourth": fourth.evaluated, "fourth_prompt": fourth.prompt_tokens,
            "prompt": sum(r.prompt_tokens for r in rows), "seconds": seconds, "cache": cache}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--model", type=Path, help="a GGUF (default: the tiny qwen35moe, written here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        gguf = args.model or tinyqwen35.write_tiny_qwen35moe(
            home / "tiny-qwen35moe.gguf", chat_template=tinyqwen35.QWEN35_TEMPLATE)
        results = {}
        for label, extra in (("off (--prompt-cache-mb 0)", ["--prompt-cache-mb", "0"]),
                             ("on (default budget)", [])):
            (home / label[:3].strip()).mkdir()
            results[label] = one(gguf, home / label[:3].strip(), args.rounds, extra)
    print(f"{'prompt cache':28} {'prompt':>7} {'round 1':>8} {'rounds 2+':>10} {'worst-new':>10} "
          f"{'4th conv':>9} {'seconds':>8}  cache")
    for label, r in results.items():
        c = r["cache"]
        per = c["bytes"] // c["entries"] if c.get("entries") else 0
        print(f"{label:28} {r['prompt']:7d} {r['first']:8d} {r['later']:10d} "
              f"{r['later_max_over_new']:10d} {r['fourth']:4d}/{r['fourth_prompt']:<4d} "
              f"{r['seconds']:8.2f}  entries {c.get('entries')}, {c.get('bytes')} bytes "
              f"({per} per entry), hits {c.get('hits')}, misses {c.get('misses')}")


if __name__ == "__main__":
    main()
