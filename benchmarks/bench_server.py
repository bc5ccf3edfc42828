"""Does the server slow the model? Decode tok/s through `pocketchat serve` vs `pocketchat bench`.

Starts the real server (`pocketchat serve --model M --port 0`) and, alternating so both see the
same load on the machine:
  server  one streaming client (a plain http.client SSE reader, or the `openai` client with
          --client openai) asks for exactly --tokens tokens (ignore_eos); its tok/s is
          (tokens - 1) / (time of the last content event - time of the first), measured in
          the client; the server's own `timings.predicted_per_second` is printed too
  bench   `pocketchat bench --model M -n TOKENS -r 1 --json`: its tg figure
and prints both medians and their ratio (goal: server / bench >= 0.95).

Then the disconnect test, --cancels times: a client streams a long answer, closes its socket
after the first content event, and the time until /health says the engine is free again is
measured (goal: under 200 ms).

    PYTHONPATH=. python benchmarks/bench_server.py [--model starter] [--runs 5] [--tokens 256]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.serverproc import ServerProcess  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]


def _body(model: str, tokens: int) -> bytes:
    return json.dumps({"model": model, "messages": PROMPT, "max_tokens": tokens, "stream": True,
                       "ignore_eos": True, "seed": 1, "stream_options": {"include_usage": True}}).encode()


def _open_stream(url: str, body: bytes) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"server answered {resp.status}: {resp.read()[:300]!r}")
    return conn, resp


def server_run_raw(url: str, model: str, tokens: int) -> tuple[float, float]:
    """(client tok/s, server-reported tok/s) of one streamed answer."""
    conn, resp = _open_stream(url, _body(model, tokens))
    first = last = None
    used = reported = 0
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        for choice in event.get("choices", []):
            if choice["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
            if choice.get("finish_reason"):
                reported = event.get("timings", {}).get("predicted_per_second", 0.0)
        if event.get("usage"):
            used = event["usage"]["completion_tokens"]
    conn.close()
    return (used - 1) / (last - first), reported


def server_run_openai(url: str, model: str, tokens: int) -> tuple[float, float]:
    import openai

    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    first = last = None
    used, reported = 0, 0.0
    for ev in c.chat.completions.create(model=model, messages=PROMPT, max_tokens=tokens, stream=True,
                                        seed=1, stream_options={"include_usage": True},
                                        extra_body={"ignore_eos": True}):
        if ev.choices and ev.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if ev.choices and ev.choices[0].finish_reason:
            reported = (getattr(ev, "timings", None) or {}).get("predicted_per_second", 0.0)
        if ev.usage:
            used = ev.usage.completion_tokens
    return (used - 1) / (last - first), reported


def bench_run(model: str, tokens: int, ctx: int, env: dict, threads: list[str]) -> float:
    out = subprocess.run([sys.executable, "-m", "pocketchat", "bench", "--model", model, "--ctx", str(ctx),
                          "-p", "16", "-n", str(tokens), "-r", "1", "--json", *threads],
                         capture_output=True, text=True, env=env, timeout=600, check=True)
    results = json.loads(out.stdout)["results"]
    return next(r["tok_s"] for r in results if r["test"].startswith("tg"))


def cancel_latency(srv: ServerProcess, model: str) -> float:
    """Seconds from a client closing its socket mid-stream to /health saying the engine is free."""
    conn, resp = _open_stream(srv.url, _body(model, 4000))
    for raw in resp:
        if b'"content":"' in raw and b'"content":""' not in raw:
            break
    conn.sock.shutdown(socket.SHUT_RDWR)  # the client goes away (close alone waits for resp)
    conn.sock.close()
    closed = time.perf_counter()
    while srv.get("/health")[1]["busy"]:
        if time.perf_counter() - closed > 30:
            raise RuntimeError("the engine never stopped")
    return time.perf_counter() - closed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="starter")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--cancels", type=int, default=10)
    p.add_argument("--client", choices=["raw", "openai"], default="raw")
    p.add_argument("--threads", type=int, help="llama.cpp threads for both (default: the plan's)")
    args = p.parse_args()
    threads = ["--threads", str(args.threads)] if args.threads else []

    home = Path(tempfile.mkdtemp(prefix="bench-server-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    srv = ServerProcess(["--model", args.model, "--ctx", str(args.ctx), *threads], home, env=env)
    run = server_run_raw if args.client == "raw" else server_run_openai
    served, reported, benched = [], [], []
    try:
        srv.wait_ready()
        model = srv.get("/v1/models")[1]["data"][0]["id"]
        run(srv.url, model, 16)  # warm-up
        for i in range(args.runs):
            client_tok_s, server_tok_s = run(srv.url, model, args.tokens)
            served.append(client_tok_s)
            reported.append(server_tok_s)
            benched.append(bench_run(args.model, args.tokens, args.ctx, env, threads))
            print(f"run {i + 1}: server {served[-1]:.1f} tok/s (engine says {reported[-1]:.1f}), "
                  f"bench {benched[-1]:.1f} tok/s", flush=True)
        cancels = [cancel_latency(srv, model) for _ in range(args.cancels)]
    finally:
        srv.stop()
    s, b = statistics.median(served), statistics.median(benched)
    print(f"\nmodel {args.model}, {args.tokens} tokens, {args.runs} alternating runs, client {args.client}, "
          f"threads {args.threads or 'the plan'}")
    print(f"server (one streaming client): median {s:.1f} tok/s; engine-reported {statistics.median(reported):.1f}")
    print(f"pocketchat bench tg{args.tokens}:      median {b:.1f} tok/s")
    print(f"ratio server / bench: {s / b:.3f} (goal >= 0.95)")
    if cancels:
        ms = sorted(c * 1000 for c in cancels)
        print(f"client gone -> engine free: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms "
              f"over {len(ms)} (goal < 200 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
