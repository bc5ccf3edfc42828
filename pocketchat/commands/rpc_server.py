"""`pocketchat rpc-server`: lend this machine's memory and compute to another pocketchat.

llama.cpp's own RPC server (`ggml_backend_rpc_start_server`) on this machine's GPU, or its CPU
when it has none. Loopback by default; any other address needs --allow-remote and prints
llama.cpp's warning: the RPC protocol has no authentication, so anyone who can reach the
port can use the machine. It serves one client at a time, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading

from pocketchat.errors import UsageError


def configure(p: argparse.ArgumentParser) -> None:
    from pocketchat.rpc.endpoints import DEFAULT_PORT

    p.description = ("Serve this machine's memory and compute to another pocketchat "
                     "(`pocketchat --rpc HOST:PORT` there).")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--threads", "-t", type=int, metavar="N", help="CPU threads (default: physical cores)")
    p.add_argument("--cache", action="store_true",
                   help="keep received weights in a local cache, so the next load sends only hashes")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on a non-loopback address (no authentication: trusted networks only)")


def check_address(host: str, port: int, allow_remote: bool) -> None:
    """UsageError unless the address is loopback (or remote is allowed) and the port is free."""
    from pocketchat.rpc.endpoints import is_loopback

    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a port number", hint="Use 1 to 65535.")
    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"refusing to listen on {host}: llama.cpp's RPC protocol has no authentication, so "
            "anyone who can reach the port could use this machine",
            hint=f"On a network you trust, run again with --allow-remote (--host {host} "
                 "--allow-remote); never on an open network.")
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama.cpp binds
    try:
        probe.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="Pick another --port, or stop the program that uses this one.") from None
    finally:
        probe.close()


def run(args: argparse.Namespace) -> int:
    from pocketchat.paths import settings
    from pocketchat.rpc import server
    from pocketchat.rpc.endpoints import is_loopback
    from pocketchat.rpc.ggml import require_rpc
    from pocketchat.select.estimate import fmt_gb

    require_rpc()
    check_address(args.host, args.port, args.allow_remote)
    from pocketchat.select.defaults import cpu_threads
    from pocketchat.select.fit import check_request

    check_request(threads=args.threads)
    threads = args.threads or cpu_threads(_physical_cores())
    cache_dir = None
    if args.cache:
        cache = settings().cache_dir / "rpc"
        cache.mkdir(parents=True, exist_ok=True)
        cache_dir = str(cache)
    devices = server.server_devices()
    if not is_loopback(args.host):
        print("\n" + server.SERVER_WARNING.format(host=args.host) + "\n", file=sys.stderr)
    endpoint = f"{args.host}:{args.port}"
    print(f"pocketchat rpc-server on {endpoint} ({threads} threads"
          + (f", cache {cache_dir}" if cache_dir else "") + ")")
    for d in devices:
        print(f"  {d.name}: {d.description}, {fmt_gb(d.total_bytes)} ({fmt_gb(d.free_bytes)} free)")
    print(f"On the main machine: pocketchat --rpc {endpoint if args.host != '0.0.0.0' else 'THIS-HOST:' + str(args.port)}")
    print("Ctrl-C stops it.", flush=True)
    done = threading.Event()

    def serve() -> None:
        try:
            server.serve(args.host, args.port, threads, cache_dir, devices)
        finally:
            done.set()

    threading.Thread(target=serve, name="pocketchat-rpc-server", daemon=True).start()
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("\nrpc-server stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)  # the server thread sits in native accept(); nothing to clean up
    raise UsageError(f"llama.cpp's RPC server stopped: it could not listen on {endpoint}",
                     hint="Pick another --port or --host.")


def _physical_cores() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        return os.cpu_count() or 1
