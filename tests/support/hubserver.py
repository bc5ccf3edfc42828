"""A real HTTP server on 127.0.0.1 that speaks enough of the Hugging Face Hub's protocol for
huggingface_hub 2.4 and pocketchat: file resolve (HEAD/GET, Range, 206), the model API with its
file listing, the tree and paths-info, an optional CDN redirect, and faults to switch on.

    with HubServer() as hub:
        hub.add_repo("me/model", {"m-Q4_K_M.gguf": b"..."})
        hub.faults.drop_after = 1000        # close the connection after 1000 body bytes
        ...
        hub.bytes_served                   # body bytes sent by GET, all requests together
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".model")
CHUNK = 1024 * 1024


@dataclass
class HubFile:
    path: str
    data: bytes | None = None
    source: Path | None = None  # big files (benchmarks) are served from disk
    lfs: bool = True
    # (sha256, git sha1) given instead of hashed: a huge sparse file that is never downloaded whole
    hashes: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.hashes is not None:
            self.sha256, self.git_sha1 = self.hashes
            return
        h256, h1 = hashlib.sha256(), hashlib.sha1()
        h1.update(b"blob %d\0" % self.size)
        for block in self.blocks(0, self.size):
            h256.update(block)
            h1.update(block)
        self.sha256, self.git_sha1 = h256.hexdigest(), h1.hexdigest()

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.source.stat().st_size

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_sha1

    def blocks(self, start: int, end: int, chunk: int = CHUNK):
        """The bytes [start, end) in blocks."""
        if self.data is not None:
            view = memoryview(self.data)
            for i in range(start, end, chunk):
                yield view[i:min(i + chunk, end)]
            return
        with open(self.source, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                block = f.read(min(chunk, end - pos))
                if not block:
                    return
                pos += len(block)
                yield block

    def entry(self, *, tree: bool) -> dict:
        """The JSON the Hub gives for this file (tree/paths-info or model siblings)."""
        if tree:
            d = {"type": "file", "oid": self.git_sha1 if not self.lfs else hashlib.sha1(self.sha256.encode()).hexdigest(),
                 "size": self.size, "path": self.path}
            if self.lfs:
                d["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": 134}
            return d
        d = {"rfilename": self.path, "size": self.size,
             "blobId": self.git_sha1 if not self.lfs else hashlib.sha1(self.sha256.encode()).hexdigest()}
        if self.lfs:
            d["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": 134}
        return d


@dataclass
class Repo:
    repo_id: str
    commit: str
    files: dict[str, HubFile]


@dataclass
class Faults:
    """Switchable misbehaviour; each `*_count` is how many GET responses it hits (-1: all)."""

    drop_after: int | None = None  # close the connection after this many body bytes
    drop_count: int = 1
    stall_after: int | None = None  # stop sending for stall_s after this many body bytes
    stall_s: float = 0.0
    stall_count: int = 1
    corrupt: bool = False  # serve flipped bytes (right length, wrong content)
    rate_bps: int | None = None  # throttle every GET body
    status: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # repo -> (code, X-Error-Code)
    fail_503: int = 0  # the next N file GETs answer 503
    ignore_range: bool = False  # answer 200 with the whole file to a Range request
    # path -> the size the listing and HEAD claim, while GET serves the real bytes (a host that
    # lies about a file's size: a truncated upload, a proxy that cuts files short)
    listed_size: dict[str, int] = field(default_factory=dict)
    # path -> a byte where every GET body stops (the connection closed), while the listing, HEAD,
    # Content-Length and Content-Range all claim the whole file: the host's headers lie
    cut_at: dict[str, int] = field(default_factory=dict)
    # a GET body (or a header read's Range answer) trickled: a few bytes every `trickle_s`,
    # never silent long enough to stall
    trickle_bytes: int | None = None
    trickle_s: float = 0.05


class HubServer:
    """The server; start() binds an ephemeral port on 127.0.0.1."""

    def __init__(self, *, cdn_redirect: bool = False) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults = Faults()
        self.cdn_redirect = cdn_redirect
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._served = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._conns: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- content ----------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes | Path | HubFile], *,
                 commit: str | None = None) -> Repo:
        commit = commit or hashlib.sha1(repo_id.encode() + str(len(self.repos)).encode()).hexdigest()
        hub_files = {}
        for path, content in files.items():
            lfs = path.lower().endswith(LFS_SUFFIXES)
            if isinstance(content, HubFile):
                hub_files[path] = content
            elif isinstance(content, Path):
                hub_files[path] = HubFile(path, source=content, lfs=lfs)
            else:
                hub_files[path] = HubFile(path, data=bytes(content), lfs=lfs)
        repo = Repo(repo_id, commit, hub_files)
        self.repos[repo_id] = repo
        return repo

    def listed(self, hf: HubFile, entry: dict) -> dict:
        """A listing entry with the size the faults make the host claim."""
        size = self.faults.listed_size.get(hf.path)
        if size is None:
            return entry
        entry = {**entry, "size": size}
        if "lfs" in entry:
            entry["lfs"] = {**entry["lfs"], "size": size}
        return entry

    @property
    def bytes_served(self) -> int:
        with self._lock:
            return self._served

    def reset_counters(self) -> None:
        with self._lock:
            self._served = 0
            self.requests.clear()

    def _count(self, n: int) -> None:
        with self._lock:
            self._served += n

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> HubServer:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open (keep-alive) connection, like a server going away."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client hanging up is part of the tests
            super().handle_error(request, client_address)


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<what>revision|tree|paths-info)/(?P<rev>[^/]+)"
                  r"(?:/(?P<path>.*))?)?$")
_CDN = re.compile(r"^/cdn/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.hub._lock:
            self.hub._conns.add(self.connection)

    def finish(self) -> None:
        with self.hub._lock:
            self.hub._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    # -- helpers ------------------------------------------------------------------------------
    def _send(self, code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, headers: dict[str, str] | None = None) -> None:
        self._send(200, {"Content-Type": "application/json", **(headers or {})}, json.dumps(obj).encode())

    def _error(self, code: int, error_code: str | None, message: str, extra: dict | None = None) -> None:
        headers = {"Content-Type": "application/json", **(extra or {})}
        if error_code:
            headers["X-Error-Code"] = error_code
        headers["X-Error-Message"] = message
        self._send(code, headers, json.dumps({"error": message}).encode())

    def _repo(self, repo_id: str) -> Repo | None:
        forced = self.hub.faults.status.get(repo_id)
        if forced:
            code, err = forced
            msg = "Access to model %s is restricted. You must be authenticated to access it." % repo_id
            self._error(code, err, msg)
            return None
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _preflight(self) -> bool:
        self.hub.requests.append((self.command, self.path, self.headers))  # case-insensitive
        return True

    # -- verbs --------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if not self._preflight():
            return
        url = urlsplit(self.path)
        path = unquote(url.path)
        if m := _RESOLVE.match(path):
            return self._resolve(m["repo"], m["rev"], m["path"])
        if m := _CDN.match(path):
            for repo in self.hub.repos.values():
                for hf in repo.files.values():
                    if hf.sha256 == m["sha"]:
                        return self._file(repo, hf, {})
            return self._error(404, None, "no such object")
        if m := _API.match(path):
            repo = self._repo(m["repo"])
            if repo is None:
                return
            rev = m["rev"] or "main"
            if rev not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", "Revision not found")
            if m["what"] == "tree":
                prefix = (m["path"] or "").strip("/")
                entries = [self.hub.listed(f, f.entry(tree=True)) for p, f in sorted(repo.files.items())
                           if not prefix or p.startswith(prefix + "/")]
                return self._json(entries)
            return self._json({"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit,
                               "private": False, "gated": False, "tags": ["gguf"],
                               "siblings": [self.hub.listed(f, f.entry(tree=False))
                                            for _p, f in sorted(repo.files.items())]})
        self._error(404, None, "not found")

    def do_POST(self) -> None:
        if not self._preflight():
            return
        m = _API.match(unquote(urlsplit(self.path).path))
        if not m or m["what"] != "paths-info":
            return self._error(404, None, "not found")
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        repo = self._repo(m["repo"])
        if repo is None:
            return
        wanted = form.get("paths", [])
        self._json([self.hub.listed(repo.files[p], repo.files[p].entry(tree=True))
                    for p in wanted if p in repo.files])

    def _resolve(self, repo_id: str, rev: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        if rev not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Revision not found")
        hf = repo.files.get(path)
        if hf is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
        meta = {"X-Repo-Commit": repo.commit, "ETag": f'"{hf.etag}"', "Accept-Ranges": "bytes"}
        if hf.lfs:
            claimed = self.hub.faults.listed_size.get(hf.path, hf.size)
            meta.update({"X-Linked-Etag": f'"{hf.sha256}"', "X-Linked-Size": str(claimed)})
        if self.hub.cdn_redirect and hf.lfs:
            meta["Location"] = f"http://localhost:{self.hub.port}/cdn/{hf.sha256}"
            return self._send(302, meta)
        self._file(repo, hf, meta)

    def _file(self, repo: Repo, hf: HubFile, meta: dict[str, str]) -> None:
        f = self.hub.faults
        if self.command == "GET" and f.fail_503 > 0:
            f.fail_503 -= 1
            return self._error(503, None, "Service unavailable")
        start, end, code = 0, hf.size, 200
        rng = self.headers.get("Range")
        if rng and not f.ignore_range:
            m = _RANGE.match(rng.strip())
            if not m or int(m[1]) >= hf.size:
                return self._send(416, {"Content-Range": f"bytes */{hf.size}"})
            start = int(m[1])
            end = min(int(m[2]) + 1, hf.size) if m[2] else hf.size
            code = 206
        self.send_response(code)
        headers = {**meta, "Content-Type": "application/octet-stream", "Content-Length": str(end - start),
                   "ETag": f'"{hf.etag}"', "Accept-Ranges": "bytes"}
        if code == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{hf.size}"
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        self._body(hf, start, end)

    def _body(self, hf: HubFile, start: int, end: int) -> None:
        f = self.hub.faults
        drop = f.drop_after if f.drop_after is not None and f.drop_count != 0 else None
        stall = f.stall_after if f.stall_after is not None and f.stall_count != 0 else None
        if drop is not None and f.drop_count > 0:
            f.drop_count -= 1
        if stall is not None and f.stall_count > 0:
            f.stall_count -= 1
        chunk = 64 * 1024 if (f.rate_bps or drop is not None or stall is not None) else CHUNK
        if f.trickle_bytes:
            chunk = f.trickle_bytes
        sent = 0
        t0 = time.monotonic()
        cut = f.cut_at.get(hf.path)
        if cut is not None and drop is None:
            drop = max(cut - start, 0)  # the body stops at that byte of the file, every time
        try:
            for block in hf.blocks(start, end, chunk):
                if drop is not None and sent + len(block) > drop:
                    block = block[: max(drop - sent, 0)]
                    self.wfile.write(block)
                    self.hub._count(len(block))
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if stall is not None and sent + len(block) > stall:
                    time.sleep(f.stall_s)
                    stall = None
                if f.corrupt:
                    block = bytes(b ^ 0x5A for b in block)
                self.wfile.write(block)
                sent += len(block)
                self.hub._count(len(block))
                if f.trickle_bytes:
                    time.sleep(f.trickle_s)
                if f.rate_bps:
                    ahead = sent / f.rate_bps - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


@pytest.fixture
def hub(monkeypatch):
    """A running HubServer, with HF_ENDPOINT pointing at it."""
    from pocketchat import paths

    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        paths.reset()
        yield server
    paths.reset()


def blob(n: int, seed: int) -> bytes:
    """n deterministic pseudo-random bytes (different per seed)."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d-%d" % (seed, counter)).digest() * 64
        counter += 1
    return bytes(out[:n])
