"""Claude Code's own first request against `pocketchat serve`, before and after a restart.

    env PYTHONPATH=. .venv/bin/python benchmarks/bench_agent_restart.py \
        --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf [--threads 2] [--disk-mb 4096]

1. Records the first request Claude Code sends: the real CLI (installed by .ci/run into
   POCKETCHAT_AGENT_CLIS) runs `claude -p` pointed at a recorder on 127.0.0.1 that saves the
   body and answers 500 (nothing leaves the machine; its home is a temporary folder).
2. Sends that body, as it is but for `max_tokens` (--max-tokens: the time to the first token is
   what is measured), to a freshly started `pocketchat serve` (one sequence, the disk tier on,
   an empty cache folder), streaming; stops the server, starts it again on the same folder and
   sends it again.
Prints, for each start: the request's bytes, its input tokens, the tokens read from a cached
state (`cache_read_input_tokens`), the seconds from sending to the first streamed token, the
load time; and the disk tier's figures from /health after each (bytes written, entries, the
writer's seconds).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.serverproc import ServerProcess  # noqa: E402

CLIS = Path(os.environ.get("POCKETCHAT_AGENT_CLIS") or Path.home() / ".cache/pocketchat/agent-clis")
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def record_claude_code(home: Path) -> tuple[str, bytes]:
    """(path, body) of the first POST Claude Code sends to its Anthropic base URL."""
    seen: list[tuple[str, bytes]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            seen.append((self.path, self.rfile.read(int(self.headers.get("content-length", 0)))))
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type":"error","error":{"type":"api_error","message":"recorded"}}')

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    claude = CLIS / "node_modules" / ".bin" / "claude"
    if not claude.exists():
        sys.exit(f"Claude Code is not installed in {CLIS}: run .ci/run once (it installs it)")
    work = home / "project"
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(QUIET, HOME=str(home), ANTHROPIC_API_KEY="local",
               ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}")
    try:
        subprocess.run([str(claude), "-p", "List the files here and say what this project is."],
                       env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=120)
    except subprocess.TimeoutExpired:
        pass
    finally:
        server.shutdown()
    posts = [(p, b) for p, b in seen if p.split("?")[0].endswith("/messages")]
    if not posts:
        sys.exit("Claude Code sent no Messages request to the recorder")
    return posts[0]


def first_token(url: str, path: str, body: bytes) -> dict:
    """Send the request streaming; seconds to the first streamed token and the usage."""
    req = urllib.request.Request(url + path, data=body, method="POST", headers={
        "content-type": "application/json", "x-api-key": "local",
        "anthropic-version": "2023-06-01"})
    sent = time.monotonic()
    ttft = None
    usage: dict = {}
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            kind = event.get("type")
            if kind == "message_start":
                usage.update(event["message"].get("usage", {}))
            elif kind == "content_block_delta" and ttft is None:
                ttft = time.monotonic() - sent
            elif kind == "message_delta":
                usage.update(event.get("usage", {}))
    return {"ttft": ttft, "total": time.monotonic() - sent, "usage": usage}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--disk-mb", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=4)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="agent-restart-"))
    path, body = record_claude_code(home / "claude-home")
    request = json.loads(body)
    print(f"Claude Code's first request: {len(body):,} bytes, {len(request.get('tools', []))} "
          f"tools, model id {request.get('model')!r}, path {path}")
    request["max_tokens"] = args.max_tokens
    payload = json.dumps(request).encode()
    serve_args = ["--model", args.model, "--ctx", str(args.ctx), "--parallel", "1",
                  "--prompt-cache-disk-mb", str(args.disk_mb)]
    if args.threads:
        serve_args += ["--threads", str(args.threads)]
    for label in ("cold (empty disk tier)", "after a restart"):
        srv = ServerProcess(serve_args, home)
        try:
            started = time.monotonic()
            srv.wait_ready(timeout=1800)
            load = time.monotonic() - started
            got = first_token(srv.url, path, payload)
            disk: dict = {}
            for _ in range(600):  # the writer thread runs after the answer
                disk = srv.get("/health")[1].get("cache", {}).get("disk", {})
                if label.startswith("after") or (disk.get("writes", 0) >= 1 and not disk.get("pending")):
                    break
                time.sleep(0.5)
        finally:
            srv.stop()
        u = got["usage"]
        print(f"{label}: load {load:.1f} s; input {u.get('input_tokens', 0) + u.get('cache_read_input_tokens', 0):,} "
              f"tokens, {u.get('cache_read_input_tokens', 0):,} read from a cached state; "
              f"first token after {got['ttft']:.1f} s (answer done after {got['total']:.1f} s)")
        print(f"  disk tier: {json.dumps(disk, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
