"""Pooling over llama.cpp's RPC backend on one machine (two processes over 127.0.0.1).

Prints: what the helper reports and the link figures, the starter model's pp/tg pooled and alone
(`pocketchat bench --rpc`, alternating runs), and how long after the helper is killed the answer
ends with HelperGone.

    python benchmarks/rpc_pool.py [--reps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(threads: int) -> tuple[subprocess.Popen, str]:
    from pocketchat.rpc.wire import reachable

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pocketchat", "rpc-server", "--port", str(port),
                             "--threads", str(threads)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"127.0.0.1:{port}"
    while reachable(endpoint, timeout=1.0):
        time.sleep(0.2)
    return proc, endpoint


def kill_time(endpoint: str, proc: subprocess.Popen, threads: int) -> float:
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.engines import open_engine
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.errors import HelperGone

    choice = choose_model(Selection(model="starter", ctx=1024, offline=True, threads=threads,
                                    rpc=(endpoint,)))
    engine = open_engine(choice.plan, choice.path, name="starter")
    killed = 0.0
    try:
        for n, _ in enumerate(engine.chat([Message("user", "A long story, please.")],
                                          ChatOptions(max_tokens=3000, ignore_eos=True))):
            if n == 3:
                killed = time.monotonic()
                proc.kill()
    except HelperGone:
        return time.monotonic() - killed
    finally:
        engine.close()
    raise SystemExit("the answer did not end with HelperGone")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    from pocketchat.rpc.wire import probe_helper

    proc, endpoint = start_server(a.threads)
    try:
        h = probe_helper(endpoint)
        print(f"helper {endpoint}: total {h.total_bytes / 1e9:.1f} GB, rtt {h.rtt_seconds * 1e3:.3f} ms, "
              f"throughput {h.throughput_bytes_s / 1e6:.0f} MB/s")
        out = subprocess.run([sys.executable, "-m", "pocketchat", "bench", "--model", "starter", "--offline",
                              "--rpc", endpoint, "-t", str(a.threads), "-r", str(a.reps), "--json"],
                             cwd=REPO, capture_output=True, text=True, check=True)
        for run in json.loads(out.stdout)["runs"]:
            figures = ", ".join(f"{r['test']} {r['tok_s']:.1f} ± {r['stdev']:.1f} tok/s" for r in run["results"])
            print(f"{run['placement_detail']}: {figures}")
        times = []
        for _ in range(3):
            times.append(kill_time(endpoint, proc, a.threads))
            proc, endpoint = start_server(a.threads)
        print("helper killed -> HelperGone after " + ", ".join(f"{t:.2f} s" for t in times))
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
