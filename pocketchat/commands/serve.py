"""`pocketchat serve`: the chosen model as an OpenAI-compatible API on this machine.

The same choice, download step and load plan as the chat; then the port is bound at once
and the model loads in the background (GET /health says "loading", then "ready"). Loopback
by default; any other address needs an API key. Run by uvicorn (see server/app.py).
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from pocketchat.errors import PocketchatError, UsageError


def configure(p: argparse.ArgumentParser) -> None:
    from pocketchat.commands.selection import add_selection_args

    add_selection_args(p)
    p.description = ("Serve the chosen model as an OpenAI-compatible API: point a client at "
                     "http://HOST:PORT/v1.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--api-key", metavar="KEY",
                   help="require `Authorization: Bearer KEY` (or set POCKETCHAT_API_KEY)")
    p.add_argument("--queue", type=int, default=8, metavar="N",
                   help="requests that may wait for the model; more get 429 (default 8)")


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


def model_id(choice) -> str:
    """The name clients send as `model`: the build id, or the file's name."""
    if choice.build is not None:
        return choice.build.id
    return choice.name


def run(args: argparse.Namespace) -> int:
    from pocketchat.commands.common import choose_model
    from pocketchat.commands.download import TerminalProgress, make_confirm
    from pocketchat.commands.selection import Selection
    from pocketchat.paths import settings

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    if args.queue < 1:
        raise UsageError(f"--queue must be at least 1, got {args.queue}")
    api_key = args.api_key or settings().api_key
    loopback = is_loopback(args.host)
    if not loopback and not api_key:
        raise UsageError(f"listening on {args.host} lets other machines reach the model, so it "
                         "needs an API key",
                         hint="Pass --api-key KEY (or set POCKETCHAT_API_KEY); clients send "
                              "`Authorization: Bearer KEY`. Or listen on 127.0.0.1 (the default).")
    sel = Selection.from_args(args)
    progress = TerminalProgress()
    try:
        choice = choose_model(sel, confirm=make_confirm(sel.yes), progress=progress)
    finally:
        progress.finish()
    sock = bind(args.host, args.port)
    return _serve(args, choice, sock, api_key, loopback)


def _serve(args: argparse.Namespace, choice, sock: socket.socket, api_key: str | None,
           loopback: bool) -> int:
    import uvicorn

    from pocketchat.engines import open_engine
    from pocketchat.server.app import create_app
    from pocketchat.server.host import EngineHost
    from pocketchat.textsafe import one_line

    port = sock.getsockname()[1]
    host_text = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host_text}:{port}/v1"
    name = model_id(choice)
    failed: list[PocketchatError] = []
    server: uvicorn.Server | None = None

    def on_state(host: EngineHost) -> None:
        if host.state == "ready":
            what = "restarted after a crash" if host.restarts else "ready"
            print(one_line(f"{what}: {name} at {url} (Ctrl-C to stop)"), file=sys.stderr, flush=True)
        elif host.state == "error" and host.error is not None and not host.restarts:
            failed.append(host.error)  # the first load failed: nothing to serve
            if server is not None:
                server.should_exit = True

    host = EngineHost(lambda: open_engine(choice.plan, choice.path, name=choice.label),
                      queue_size=args.queue, on_state=on_state)
    aliases = [a for a in (args.model, choice.label) if a and a != name]
    info = {"max_model_len": choice.plan.n_ctx,
            "meta": {"backend": choice.plan.backend, "placement": choice.plan.describe(),
                     "n_ctx": choice.plan.n_ctx}}
    app = create_app(host, model_id=name, aliases=aliases, api_key=api_key,
                     loopback_only=loopback, model_info=info)
    print(one_line(f"loading {choice.label} ({choice.plan.describe()}); listening on {url}"
                   + ("" if loopback else " (API key required)")), file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    if failed:
        raise failed[0]
    return 0
