"""`pocketchat --recommend`: how long it takes, and how right its speed estimates are here.

Run: python benchmarks/bench_recommend.py [--runs 5] [--full-size DIR [--quants IQ1_M,Q2_K,Q3_K_M] [--save-profile FILE]]

1. Time: the median wall time of the whole command from a cold process (goal: under 1 s once
   the probes are cached) for this machine and for a replayed profile, the heavy modules it
   imported, and the first run's time with a fresh cache (the bandwidth and kernel probes:
   goal under 5 s) against the next one's (read from the cache).
2. `--full-size DIR`: for each quant whose full-size synthetic POCKET is in DIR
   (`DIR/POCKET-35B-<QUANT>-synthetic.gguf`, written by `benchmarks/pocket_scale.py
   --write-only`), with one fresh cache directory (no measured runs, so no calibration):
   `--recommend`'s decode and prompt estimates for the catalog build of that quant, the bound it
   names, its threads, against `pocketchat bench --model FILE -p 512 -n 64 -r 2` (tg and pp
   tok/s); then the ratios and whether the estimated order of the builds is the measured order
   (goal: each within 20%, same order; two builds measured within 5% are a tie, no order).
   `--save-profile FILE` writes the probe the estimates came from, to replay this machine in
   tests/profiles/; `--busy N` runs it all beside N busy processes (`bench_busy.Busy`). One full-size model is loaded at a time; run it alone on the machine:
   `python benchmarks/bench_recommend.py --full-size PATH/TO/FOLDER`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "tests" / "profiles" / "linux-16gb.json"
HEAVY = ("llama_cpp", "mlx", "mlx_lm", "textual", "huggingface_hub")


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, POCKETCHAT_CACHE_DIR=str(cache / "cache"), POCKETCHAT_DATA_DIR=str(cache / "data"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def pocketchat(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pocketchat", *args], capture_output=True, text=True,
                         check=False, env=env)
    return time.perf_counter() - t0, out


def timed(args: list[str], runs: int, env: dict[str, str]) -> float:
    return statistics.median(pocketchat(args, env)[0] for _ in range(runs))


def timing(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(Path(tmp))
        first, _ = pocketchat(["--probe"], env)  # fresh cache: the bandwidth and kernel probes
        second, _ = pocketchat(["--probe"], env)
        here = timed(["--recommend"], runs, env)
        replay = timed(["--recommend", "--hardware", str(PROFILE)], runs, env)
        code = ("import sys; from pocketchat.cli import main; main(['--recommend']);"
                f"print([m for m in {HEAVY!r} if m in sys.modules])")
        imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  env=env).stdout.strip().splitlines()[-1]
    print(f"pocketchat --probe, fresh cache (bandwidth + kernel probes): {first * 1000:.0f} ms; "
          f"next run (cached): {second * 1000:.0f} ms  (goal: first < 5000 ms)")
    print(f"pocketchat --recommend (this machine): {here * 1000:.0f} ms median of {runs}")
    print(f"pocketchat --recommend --hardware:     {replay * 1000:.0f} ms median of {runs}")
    print(f"heavy modules imported: {imported}")
    print("goal: < 1000 ms;", "met" if max(here, replay) < 1.0 else "NOT met")


def full_size(folder: Path, quants: list[str], save_profile: Path | None = None) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(Path(tmp))
        took, out = pocketchat(["--recommend", "--json"], env)
        print(f"$ pocketchat --recommend --json  (fresh cache: {took:.1f} s, probes included)")
        probe_json = pocketchat(["--probe", "--json"], env)[1].stdout  # the same cached probes
        rec = json.loads(out.stdout)
        hw = rec["hardware"]
        print(f"  bandwidth {hw['memory_bandwidth_gbps']} GB/s, busy {hw['cpu_busy_cores']} cores, "
              f"kernels measured at {sorted((hw['kernels'] or {}).get('threads', {}))} threads")
        by_id = {c["build"]: c for c in rec["candidates"]}
        for quant in quants:
            path = folder / f"POCKET-35B-{quant}-synthetic.gguf"
            cand = by_id.get(f"POCKET-35B-{quant}")
            if not path.is_file() or cand is None:
                print(f"  {quant}: skipped ({path} missing)" if cand else f"  {quant}: not in the catalog")
                continue
            with tempfile.TemporaryDirectory() as fresh:  # no measured run calibrates the next
                benv = _env(Path(fresh))
                cache = Path(fresh) / "cache"
                cache.mkdir(parents=True)
                for name in ("bandwidth.json", "kernels.json"):  # the same probes as --recommend
                    src = Path(tmp) / "cache" / name
                    if src.is_file():
                        (cache / name).write_bytes(src.read_bytes())
                cmd = ["bench", "--model", str(path), "-p", "512", "-n", "64", "-r", "2", "--json"]
                print(f"$ pocketchat {' '.join(cmd)}")
                _, b = pocketchat(cmd, benv)
            if b.returncode != 0:
                print(f"  bench failed: {b.stderr.strip()[-300:]}")
                continue
            res = json.loads(b.stdout)
            tg = next(r for r in res["results"] if r["test"].startswith("tg"))
            pp = next(r for r in res["results"] if r["test"].startswith("pp"))
            bound = next((p for p in cand["reason"].split("; ") if "-bound here" in p), "-")
            rows.append((quant, cand["estimated_decode_tok_s"], cand["n_threads"], bound, tg["tok_s"],
                         res["n_threads"], cand.get("estimated_prompt_tok_s") or 0.0, pp["tok_s"]))
    print()
    print(f"{'build':10} {'decode est':>10} {'threads':>7}  {'bound':34} {'bench':>7} {'threads':>7} "
          f"{'est/bench':>9} | {'prompt est':>10} {'bench pp':>8} {'est/bench':>9}")
    for q, e, t, bound, m, mt, pe, pm in rows:
        print(f"{q:10} {e:10.2f} {t:7d}  {bound:34} {m:7.2f} {mt:7d} {e / m:9.2f} | {pe:10.1f} {pm:8.1f} "
              f"{pe / pm:9.2f}")
    for what, est_i, bench_i in (("decode", 1, 4), ("prompt", 6, 7)):
        if not rows:
            break
        worst = max(abs(r[est_i] / r[bench_i] - 1) for r in rows)
        wrong, ties = order_check([(r[0], r[est_i], r[bench_i]) for r in rows])
        said = "matches" if not wrong else "does NOT match (" + ", ".join(wrong) + ")"
        tied = f"; measured within {TIE:.0%}, a tie: {', '.join(ties)}" if ties else ""
        print(f"{what}: largest error {worst * 100:.0f}% (goal <= 20%): {'met' if worst <= 0.2 else 'NOT met'}; "
              f"estimated order {said} the measured order{tied}")
    if save_profile is not None:
        save_profile.write_text(probe_json)
        print(f"the probe this ran on: {save_profile}")


# Two builds whose measured speeds are this close have no order a run can show (two runs of one
# build differ by as much): they are reported as a tie, not as an order right or wrong.
TIE = 0.05


def order_check(rows: list[tuple[str, float, float]]) -> tuple[list[str], list[str]]:
    """(pairs estimated in the wrong order, pairs measured within TIE): of (build, estimate, measured)."""
    wrong, ties = [], []
    for i, (a, ea, ma) in enumerate(rows):
        for b, eb, mb in rows[i + 1:]:
            if max(ma, mb) <= min(ma, mb) * (1 + TIE):
                ties.append(f"{a}/{b}")
            elif (ea > eb) != (ma > mb):
                wrong.append(f"{a}/{b}")
    return wrong, ties


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--full-size", type=Path, metavar="DIR",
                    help="compare estimates with bench on the full-size synthetic files in DIR")
    ap.add_argument("--quants", default="IQ1_M,Q2_K,Q3_K_M")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="with --full-size: N busy processes (bounded loops) beside the whole run, "
                         "the probe and bench alike")
    ap.add_argument("--save-profile", type=Path, metavar="FILE",
                    help="with --full-size: write the probe the estimates came from (`--probe --json`), "
                         "to replay this machine in tests/profiles/")
    args = ap.parse_args()
    if args.full_size:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_busy import Busy

        with Busy(args.busy, limit=3600):
            if args.busy:
                print(f"beside {args.busy} busy process{'es' if args.busy > 1 else ''}")
            full_size(args.full_size, [q for q in args.quants.split(",") if q], args.save_profile)
    else:
        timing(args.runs)


if __name__ == "__main__":
    main()
