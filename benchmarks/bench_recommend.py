"""How long `pocketchat --recommend` takes from a cold process, and what it imports.

Run: python benchmarks/bench_recommend.py [--runs 5]
Prints the median wall time of the whole command (goal: under 1 s, the first bandwidth probe
aside) for this machine and for a replayed profile, and the heavy modules it imported.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[1] / "tests" / "profiles" / "linux-16gb.json"
HEAVY = ("llama_cpp", "mlx", "mlx_lm", "textual", "huggingface_hub")


def timed(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pocketchat", *args], capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    subprocess.run([sys.executable, "-m", "pocketchat", "--probe"], capture_output=True)  # warm the bandwidth cache
    here = timed(["--recommend"], runs)
    replay = timed(["--recommend", "--hardware", str(PROFILE)], runs)
    code = ("import sys; from pocketchat.cli import main; main(['--recommend']);"
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"pocketchat --recommend (this machine): {here * 1000:.0f} ms median of {runs}")
    print(f"pocketchat --recommend --hardware:     {replay * 1000:.0f} ms median of {runs}")
    print(f"heavy modules imported: {imported}")
    print("goal: < 1000 ms;", "met" if max(here, replay) < 1.0 else "NOT met")


if __name__ == "__main__":
    main()
