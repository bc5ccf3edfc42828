"""`pocketchat serve`: the chosen model as an OpenAI-compatible API on this machine.

The same choice, download step and load plan as the chat (through api.py: `choose`, then
`open_session` for the engine); then the port is bound at once and the model loads in the
background (GET /health says "loading", then "ready"). Loopback by default; any other address
needs an API key; web pages of other origins than this machine's need --cors-origin. Run by
uvicorn (see server/app.py).
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import Any
from dataclasses import replace

from pocketchat.errors import PocketchatError, UsageError

# The shortest time between two streamed events of one answer (the first token goes at once).
# Each event costs this machine about 1 ms of CPU, the server's and the client's together, and on
# a CPU-only machine that time is taken from the model's decoding: with one `openai` client on the
# starter, `serve --parallel 4` decoded at 0.956 of `bench`'s speed at 30 ms apart, 0.967 at 50,
# 1.00 at 100 (`benchmarks/bench_overhead.py --against bench --paths serve4@30,serve4@50,serve4`).
# 100 ms is the chat's pace too (ui.streaming.UPDATES_PER_SECOND), which `bench` reads at.
STREAM_INTERVAL_MS = 100


def configure(p: argparse.ArgumentParser) -> None:
    from pocketchat.choose.selection import add_prompt_cache_disk_arg, add_selection_args

    add_selection_args(p)
    p.description = ("Serve the chosen model as an OpenAI-compatible API (point a client at "
                     "http://HOST:PORT/v1) and a web chat (open http://HOST:PORT/).")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--api-key", metavar="KEY",
                   help="require `Authorization: Bearer KEY` (or set POCKETCHAT_API_KEY)")
    p.add_argument("--queue", type=int, default=8, metavar="N",
                   help="requests that may wait for the model; more get 429 (default 8)")
    p.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="answers decoded together, each on its own sequence of n_ctx tokens "
                        "(llama.cpp; default: what the plan's memory allows, at most 4)")
    p.add_argument("--stream-interval", type=int, default=STREAM_INTERVAL_MS, metavar="MS",
                   help="the shortest time between two streamed events of an answer: each costs "
                        f"the machine about 1 ms of CPU (default {STREAM_INTERVAL_MS}; 0: every "
                        "token as it is decoded)")
    p.add_argument("--idle-unload", type=float, default=None, metavar="MIN",
                   help="free the model's memory after MIN minutes without a request; the next "
                        "request loads it again (default: 5 when the model needs more than half "
                        "the RAM, else never; 0: never)")
    p.add_argument("--prompt-cache-mb", type=int, default=None, metavar="N",
                   help="RAM for the states of recent conversations, so clients that take "
                        "turns do not re-read their whole conversation (0: off; default: a "
                        "share of the memory the model leaves free, shown by /health)")
    from pocketchat.commands.think import add_think_args

    add_think_args(p, default_help="on: this machine's default budget; for requests that "
                                   "say nothing of thinking")
    add_prompt_cache_disk_arg(p)
    p.add_argument("--mcp", metavar="FILE", default=None,
                   help="tool servers for the web chat (an mcpServers JSON file; default: "
                        "mcp.json in pocketchat's config folder, if there); each call is "
                        "confirmed in the page")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. https://app.example.com; '*' for any) "
                        "call the server from a browser; pages on this machine (localhost) "
                        "always may. Repeat for several.")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one clear error (address in use, unknown address)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {host}: {exc.strerror}",
                         hint="Give an IP address of this machine with --host.") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
                         hint="Another program may use that port: pick another with --port.") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def check_prompt_cache(megabytes: int, profile) -> None:
    """`--prompt-cache-mb` against the RAM this machine has for models (what is available less
    the reserve, select/budget.py): UsageError with the figure when it cannot fit."""
    from pocketchat.select.budget import cpu_budget

    room = cpu_budget(profile)
    if megabytes * 1024**2 > room:
        raise UsageError(
            f"--prompt-cache-mb {megabytes} asks for {_size(megabytes * 1024**2)} of RAM, but this "
            f"machine has {_size(room)} available for the model and its caches",
            hint=f"Give at most {room // 1024**2} (less leaves room for the model itself), or "
                 "leave it out for the default share.")


def _size(n: int) -> str:
    for unit, scale in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def model_id(choice) -> str:
    """The name clients send as `model`: the build id, or the file's name."""
    if choice.build is not None:
        return choice.build.id
    return choice.name


def run(args: argparse.Namespace) -> int:
    from pocketchat.commands.download import choose_on_terminal
    from pocketchat.choose.selection import Selection
    from pocketchat.paths import settings
    from pocketchat.server.cors import parse_origin

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    if args.queue < 1:
        raise UsageError(f"--queue must be at least 1, got {args.queue}")
    if args.parallel is not None and not 1 <= args.parallel <= 64:
        raise UsageError(f"--parallel must be between 1 and 64, got {args.parallel}")
    if args.idle_unload is not None and not 0 <= args.idle_unload <= 7 * 24 * 60:
        raise UsageError(f"--idle-unload must be between 0 and 10080 minutes, got {args.idle_unload:g}",
                         hint="Give the minutes without a request before the model is freed; 0 "
                              "keeps it loaded.")
    if not 0 <= args.stream_interval <= 1000:
        raise UsageError(f"--stream-interval must be between 0 and 1000 ms, got {args.stream_interval}")
    for origin in args.cors_origin:
        parse_origin(origin)  # UsageError before anything is loaded
    if args.prompt_cache_mb is not None and args.prompt_cache_mb < 0:
        raise UsageError(f"--prompt-cache-mb must be 0 or more, got {args.prompt_cache_mb}",
                         hint="Give the megabytes of RAM for the prompt cache; 0 turns it off.")
    api_key = args.api_key or settings().api_key
    loopback = is_loopback(args.host)
    if not loopback and not api_key:
        raise UsageError(f"listening on {args.host} lets other machines reach the model, so it "
                         "needs an API key",
                         hint="Pass --api-key KEY (or set POCKETCHAT_API_KEY); clients send "
                              "`Authorization: Bearer KEY`. Or listen on 127.0.0.1 (the default).")
    from pocketchat.tools.loop import open_servers

    args.tools = open_servers(args.mcp)  # a bad config: said before any download
    sel = Selection.from_args(args)
    if args.prompt_cache_mb is not None:  # before any download
        check_prompt_cache(args.prompt_cache_mb, sel.profile())
    choice = choose_on_terminal(sel)
    if args.prompt_cache_mb is not None:
        choice = replace(choice, plan=replace(choice.plan,
                                              prompt_cache_bytes=args.prompt_cache_mb * 1024**2))
    from pocketchat.commands.think import resolve, think_of

    args.thinking_default = resolve(think_of(args), choice, sel)
    args.idle_seconds = idle_seconds(args.idle_unload, _file_size(choice.path),
                                     sel.profile().ram_total_bytes)
    sock = bind(args.host, args.port)
    return _serve(args, choice, sock, api_key, loopback)


IDLE_DEFAULT_MIN = 5.0  # Ollama's keep_alive default


def idle_seconds(minutes: float | None, model_bytes: int, ram_bytes: int) -> float | None:
    """Seconds without a request before the model is freed (None: never): `--idle-unload`'s,
    else 5 minutes when the model takes more than half the machine's RAM (a laptop wants it
    back), else never (a small model costs little to keep)."""
    if minutes is not None:
        return minutes * 60 if minutes > 0 else None
    if ram_bytes and model_bytes > ram_bytes / 2:
        return IDLE_DEFAULT_MIN * 60
    return None


def _file_size(path: Any) -> int:
    """The model's bytes on disk (a file, or an MLX folder's files); 0 when unknown."""
    from pathlib import Path

    try:
        p = Path(path)
        return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.glob("*"))
    except (OSError, TypeError):
        return 0


def _serve(args: argparse.Namespace, choice, sock: socket.socket, api_key: str | None,
           loopback: bool) -> int:
    import uvicorn

    from pocketchat import api
    from pocketchat.server.app import create_app
    from pocketchat.server.host import EngineHost
    from pocketchat.commands.weblink import announce
    from pocketchat.server.thinking import ThinkDefault
    from pocketchat.textsafe import one_line

    port = sock.getsockname()[1]
    host_text = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host_text}:{port}/v1"
    name = model_id(choice)
    failed: list[PocketchatError] = []
    announced: list[str] = []  # the web chat's address, said once
    server: uvicorn.Server | None = None

    def on_state(host: EngineHost) -> None:
        if host.state == "not_responding" and host.error is not None:
            print(one_line(f"{host.error.message}; requests get a 503 until it resumes, or until "
                           f"it is restarted in {host.restart_stuck:.0f} s"), file=sys.stderr, flush=True)
        elif host.state == "idle":
            print(one_line(f"unloaded after {host.idle_unload / 60:g} min without a request: the "
                           "model's memory is free; the next request loads it again"),
                  file=sys.stderr, flush=True)
        elif host.state == "loading" and host.previous == "idle":
            print(one_line(f"loading {name} again for a request"), file=sys.stderr, flush=True)
        elif host.state == "ready" and host.previous == "loading" and host.unloads:
            print(one_line(f"loaded again: {name} at {url}"), file=sys.stderr, flush=True)
        elif host.state == "ready" and host.previous == "not_responding":
            print(one_line(f"the model process responds again: {name} at {url}"), file=sys.stderr,
                  flush=True)
        elif host.state == "ready":
            what = "restarted after a crash" if host.restarts else "ready"
            info["meta"]["parallel"] = host.sequences  # fewer when the engine cannot batch this model
            if host.one_at_a_time and not host.restarts:
                print(one_line(host.one_at_a_time), file=sys.stderr, flush=True)
            print(one_line(f"{what}: {name} at {url}{thinks(host)} (Ctrl-C to stop)"),
                  file=sys.stderr, flush=True)
            if not host.restarts and not announced:
                announced.append(announce(args.host, port, loopback, _say,
                                          getattr(args, "open_browser", False)))
        elif host.state == "error" and host.error is not None and not host.restarts:
            failed.append(host.error)  # the first load failed: nothing to serve
            if server is not None:
                server.should_exit = True

    def thinks(host: EngineHost) -> str:
        """The thinking default, said once the model is known to think (never for one that
        does not: no budget to claim)."""
        engine = host.engine
        if engine is None or engine.info.thinking is False:
            return ""
        on, budget = getattr(args, "thinking_default", (True, None))
        return f"; {ThinkDefault(on, budget).describe()}"

    choice = with_parallel(choice, args.parallel)
    pace = args.stream_interval / 1000
    host = EngineHost(lambda: api.open_session(choice, chunk_interval=pace).engine,
                      queue_size=args.queue, sequences=choice.plan.parallel, on_state=on_state,
                      idle_unload=getattr(args, "idle_seconds", None))
    aliases = [a for a in (args.model, choice.label) if a and a != name]
    info = {"max_model_len": choice.plan.n_ctx,
            "meta": {"backend": choice.plan.backend, "placement": choice.plan.describe(),
                     "size": _file_size(choice.path),
                     "n_ctx": choice.plan.n_ctx, "parallel": host.sequences}}
    on, budget = getattr(args, "thinking_default", (True, None))
    tools = getattr(args, "tools", None)
    app = create_app(host, model_id=name, aliases=aliases, api_key=api_key,
                     loopback_only=loopback, model_info=info, cors_origins=args.cors_origin,
                     thinking=ThinkDefault(on, budget),
                     access_log=lambda text: print(text, file=sys.stderr, flush=True),
                     tools=tools)
    together = f", {host.sequences} answers at once" if host.sequences > 1 else ""
    idle = getattr(args, "idle_seconds", None)
    together += f"; unloaded after {idle / 60:g} min idle" if idle else ""
    print(one_line(f"loading {choice.label} ({choice.plan.describe()}{together}); listening on {url}"
                   + ("" if loopback else " (API key required)")), file=sys.stderr, flush=True)
    # No colours: uvicorn decides them from stdout, while its lines go to stderr (a file, maybe).
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=3, use_colors=False)
    server = stoppable_server(config, host)
    try:
        server.run(sockets=[sock])
    finally:
        if tools is not None:
            tools.close()
    ignore_stop_signals()  # stopped: a second Ctrl-C during the last cleanup is not a traceback
    if failed:
        raise failed[0]
    print("stopped", file=sys.stderr, flush=True)
    return 0


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def ignore_stop_signals() -> None:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def with_parallel(choice, parallel: int | None):
    """The choice with its plan's sequences: `--parallel N`, else the plan's own figure."""
    from dataclasses import replace

    n = parallel if parallel is not None else choice.plan.serve_parallel
    if n == choice.plan.parallel:
        return choice
    return replace(choice, plan=replace(choice.plan, parallel=n))


def stoppable_server(config, host) -> "uvicorn.Server":  # noqa: F821 - imported lazily
    """uvicorn's server, stopped by Ctrl-C (or SIGTERM) the way a user expects: the answer in
    progress ends at once as a complete stream, waiting requests get 503, the process exits
    with 0 and no traceback. A second Ctrl-C quits without waiting."""
    import asyncio
    import contextlib
    import logging

    import uvicorn

    from pocketchat.server.host import on_the_second

    class _CancelledAtShutdown(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:  # a task uvicorn cut off: not news
            exc = record.exc_info[1] if record.exc_info else None
            return not isinstance(exc, asyncio.CancelledError)

    class Server(uvicorn.Server):
        loop: asyncio.AbstractEventLoop | None = None
        woken: asyncio.Event | None = None

        async def serve(self, sockets=None) -> None:
            self.loop = asyncio.get_running_loop()
            self.woken = asyncio.Event()
            await super().serve(sockets)

        async def main_loop(self) -> None:
            """uvicorn's housekeeping once a second, not ten times (an idle server sleeps):
            the counter steps by 10 so its once-a-second work (the Date header) is kept, and
            a stop wakes it at once. It wakes with the host's watcher (`on_the_second`)."""
            counter = 0
            while not await self.on_tick(counter):
                counter = (counter + 10) % 864000
                assert self.woken is not None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), on_the_second(1.0))

        def handle_exit(self, sig: int, frame) -> None:  # no re-raise of the signal afterwards
            if self.should_exit:
                self.force_exit = True
                return
            self.should_exit = True
            if self.loop is not None:
                try:
                    self.loop.call_soon_threadsafe(host.close_doors)
                    if self.woken is not None:
                        self.loop.call_soon_threadsafe(self.woken.set)
                except RuntimeError:  # the loop has closed already: nothing is left open
                    pass

    logging.getLogger("uvicorn.error").addFilter(_CancelledAtShutdown())
    return Server(config)
