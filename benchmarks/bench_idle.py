"""How often an idle `pocketchat serve` wakes, and what it holds once the model is unloaded.

Starts the real server (`pocketchat serve --model M --idle-unload MIN --port 0`), asks one
question with a long system prompt (so the unload has a prompt cache to park), then measures
two windows of --seconds each, asking nothing (not even /health) meanwhile:

  loaded   the model still in its worker, nothing in flight: the voluntary context switches
           per second of the server process and of its worker, each summed over all its
           threads (`/proc/PID/task/*/status`, voluntary_ctxt_switches: a thread that sleeps
           and wakes counts one per wakeup);
  unloaded after the idle unload (the worker has ended): the server's switches per second,
           and the RSS of the server (and of a worker still there, if any).

The idle unload is set to fire after the first window (--seconds plus a margin). --threads
prints each thread's share, to find the one that wakes.

    PYTHONPATH=. python benchmarks/bench_idle.py [--model starter] [--seconds 60] [--threads]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.serverproc import ServerProcess  # noqa: E402

SYSTEM = "You answer questions about a bakery's orders in one short line each. " * 30
MARGIN = 10.0  # seconds between the end of the first window and the unload


def switches(pid: int) -> dict[str, int]:
    """Voluntary context switches of each thread of `pid` ("name/tid": count); {} when gone."""
    found: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        found[f"{fields.get('Name', '?').strip()}/{tid}"] = int(fields["voluntary_ctxt_switches"])
    return found


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    """The direct children of `pid` (the model's worker, while it runs), from each process's
    parent in /proc/*/stat."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def window(pids: dict[str, int], seconds: float) -> dict[str, tuple[float, dict[str, float]]]:
    """Per process: (switches per second over `seconds`, per thread per second)."""
    before = {name: switches(pid) for name, pid in pids.items()}
    start = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - start
    out = {}
    for name, pid in pids.items():
        after = switches(pid)
        threads = {t: (n - before[name].get(t, 0)) / took for t, n in after.items()}
        out[name] = (sum(threads.values()), threads)
    return out


def show(title: str, figures: dict[str, tuple[float, dict[str, float]]], threads: bool) -> None:
    for name, (rate, per) in figures.items():
        print(f"  {title:9s} {name:7s} {rate:6.2f} wakeups/s")
        if threads:
            for t, r in sorted(per.items(), key=lambda kv: -kv[1]):
                if r > 0:
                    print(f"              {t:32s} {r:6.2f}/s")


def ask(srv: ServerProcess) -> dict:
    status, body = srv.post_json("/v1/chat/completions", {
        "model": "m", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": "How many loaves for order 7?"}]})
    if status != 200:
        raise RuntimeError(f"the server answered {status}: {body}")
    return body["usage"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="starter")
    ap.add_argument("--seconds", type=float, default=60.0, help="each window (20-60 s)")
    ap.add_argument("--threads", action="store_true", help="print each thread's wakeups")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 20 <= args.seconds <= 60:
        ap.error("--seconds must be between 20 and 60")
    unload_after = args.seconds + MARGIN
    with tempfile.TemporaryDirectory() as home:
        srv = ServerProcess(["--model", args.model, "--idle-unload", f"{unload_after / 60:.4f}",
                             "--prompt-cache-disk-mb", "256"], Path(home))
        try:
            srv.wait_ready(300)
            usage = ask(srv)
            workers = children(srv.pid)
            if not workers:
                raise RuntimeError("no worker process under the server")
            worker = max(workers, key=lambda p: rss_mb(p) or 0)
            loaded_rss = {"server": rss_mb(srv.pid), "worker": rss_mb(worker)}
            time.sleep(2)  # the answer settles and the status after it is asked
            loaded = window({"server": srv.pid, "worker": worker}, args.seconds)
            deadline = time.monotonic() + MARGIN + 60
            while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
                time.sleep(1.0)  # no request meanwhile: /health would wake the server
            _, health = srv.get("/health")
            if health.get("status") != "idle":
                raise RuntimeError(f"the model was not unloaded: {health}")
            time.sleep(2)
            left = children(srv.pid)
            unloaded = window({"server": srv.pid}, args.seconds)
            idle_rss = {"server": rss_mb(srv.pid),
                        "worker": sum(rss_mb(p) or 0 for p in left) if left else None}
        finally:
            srv.stop()
    result = {
        "model": args.model, "seconds": args.seconds, "prompt_tokens": usage["prompt_tokens"],
        "loaded": {k: round(v[0], 2) for k, v in loaded.items()},
        "unloaded": {k: round(v[0], 2) for k, v in unloaded.items()},
        "rss_mb_loaded": {k: round(v, 1) for k, v in loaded_rss.items() if v is not None},
        "rss_mb_unloaded": {k: (round(v, 1) if v is not None else None) for k, v in idle_rss.items()},
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"pocketchat serve --model {args.model}: idle, {args.seconds:g} s windows "
          f"(one question of {usage['prompt_tokens']} prompt tokens asked first)")
    show("loaded", loaded, args.threads)
    show("unloaded", unloaded, args.threads)
    print(f"  RSS loaded:   server {loaded_rss['server']:.0f} MB, worker {loaded_rss['worker']:.0f} MB")
    worker_text = "gone" if idle_rss["worker"] is None else f"{idle_rss['worker']:.0f} MB"
    print(f"  RSS unloaded: server {idle_rss['server']:.0f} MB, worker {worker_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
