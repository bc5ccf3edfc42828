"""Download throughput: pocketchat's store vs plain `hf_hub_download`, same file, same local server.

Run: python benchmarks/bench_download.py [--mb 200] [--runs 3]
Generates a file, serves it from the test Hub server on 127.0.0.1 (tests/support/hubserver.py, in its
own process), and
downloads it into a fresh Hugging Face cache with each client in turn (alternating, so neither
always goes first). Prints each run, the median and best throughput of each and their ratios
pocketchat / huggingface_hub (goal: at least 0.9). pocketchat also hashes every byte (SHA-256)
and fsyncs the file before it is put in place; hf_hub_download does neither.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

REPO = "bench/Bench-GGUF"
FILE = "Bench-Q4_K_M.gguf"


def make_data(nbytes: int) -> bytes:
    block = b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(32768))  # 1 MiB
    reps, rest = divmod(nbytes, len(block))
    # vary each block so nothing downstream can shortcut repeated content
    return b"".join(hashlib.sha256(b"%d" % i).digest() + block[32:] for i in range(reps)) + block[:rest]


def fresh_env(root: Path) -> Path:
    cache = root / "hub"
    shutil.rmtree(root, ignore_errors=True)
    (root / "data").mkdir(parents=True)
    os.environ["HF_HUB_CACHE"] = str(cache)
    os.environ["HF_HOME"] = str(root)
    os.environ["POCKETCHAT_DATA_DIR"] = str(root / "data")
    from pocketchat import paths

    paths.reset()
    return cache


def run_hf(root: Path, endpoint: str) -> float:
    from huggingface_hub import hf_hub_download

    cache = fresh_env(root)
    t0 = time.perf_counter()
    path = hf_hub_download(REPO, FILE, cache_dir=cache, endpoint=endpoint)
    dt = time.perf_counter() - t0
    assert Path(path).stat().st_size > 0
    return dt


def run_pocketchat(root: Path, endpoint: str) -> float:
    from pocketchat.store import api as store

    fresh_env(root)
    t0 = time.perf_counter()
    path = store.ensure(f"{REPO}:Q4_K_M")
    dt = time.perf_counter() - t0
    assert path.stat().st_size > 0
    return dt


def serve(path: Path) -> None:
    """Child process: serve one file, print the URL, run until stdin closes."""
    from support.hubserver import HubServer

    with HubServer() as hub:
        hub.add_repo(REPO, {FILE: path})
        print(hub.url, flush=True)
        sys.stdin.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="file size in MB (default 200)")
    ap.add_argument("--runs", type=int, default=5, help="downloads per client (default 5)")
    ap.add_argument("--serve", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(Path(args.serve))

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    nbytes = args.mb * 1000**2
    work = Path(tempfile.mkdtemp(prefix="bench-download-"))
    source = work / FILE
    source.write_bytes(make_data(nbytes))
    # The server runs in its own process, as a real one would: it does not share the GIL.
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(source)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        os.environ["HF_ENDPOINT"] = url
        times: dict[str, list[float]] = {"huggingface_hub": [], "pocketchat": []}
        for i in range(args.runs):
            order = [("huggingface_hub", run_hf), ("pocketchat", run_pocketchat)]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                dt = fn(work / name, url)
                times[name].append(dt)
                print(f"run {i + 1}  {name:16s} {nbytes / dt / 1e6:8.1f} MB/s  ({dt:.2f} s)")
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: nbytes / statistics.median(v) / 1e6 for k, v in times.items()}
    best = {k: nbytes / min(v) / 1e6 for k, v in times.items()}
    print(f"\nfile: {nbytes / 1e6:.0f} MB from {REPO} on a local server, {args.runs} runs each")
    print(f"{'':34s}{'median':>12s}{'best':>12s}")
    print(f"{'huggingface_hub.hf_hub_download':34s}{med['huggingface_hub']:>7.1f} MB/s{best['huggingface_hub']:>7.1f} MB/s")
    print(f"{'pocketchat store.ensure':34s}{med['pocketchat']:>7.1f} MB/s{best['pocketchat']:>7.1f} MB/s"
          "  (+ SHA-256 of every byte, fsync)")
    print(f"ratio pocketchat / huggingface_hub: median {med['pocketchat'] / med['huggingface_hub']:.2f}, "
          f"best {best['pocketchat'] / best['huggingface_hub']:.2f}  (goal >= 0.90)")

if __name__ == "__main__":
    main()
