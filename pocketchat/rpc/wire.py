"""The wire protocol of llama.cpp's RPC backend (v7, the vendored ggml-rpc.cpp), from Python.

A client small enough to ask a helper for its memory and to time the link, with timeouts:
llama.cpp's own client aborts the process when a server cannot be reached, so nothing native
touches a helper before `reachable()` said yes.

Message framing: request = cmd u8 | size u64 | data; reply = size u64 | data (little-endian).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

from pocketchat.errors import HelperUnreachable
from pocketchat.rpc.endpoints import DEFAULT_PORT, split_endpoint
from pocketchat.types import Helper

PROTO_MAJOR = 7
CONN_CAPS_SIZE = 24
HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE  # major, minor, patch, pad, conn_caps (v7); 3 bytes before
PROBE_PAYLOAD = 4 * 1024 * 1024
# Sent only to a server that stays silent after HELLO: a line any line-based server answers (an
# HTTP server with an error status). A busy rpc-server has not accepted the connection yet; when
# it does, it reads HELLO, then this as an unknown command, and drops the connection.
NUDGE = b"HEAD / HTTP/1.0\r\n\r\n"
NUDGE_WAIT_S = 1.0

# rpc_cmd values (ggml-rpc.cpp; HELLO is pinned at 14 across versions).
ALLOC_BUFFER, GET_ALIGNMENT, BUFFER_GET_BASE, FREE_BUFFER = 0, 1, 3, 4
SET_TENSOR, GET_DEVICE_MEMORY, HELLO, DEVICE_COUNT = 6, 11, 14, 15
GGML_TYPE_I8 = 24
# rpc_tensor (packed): id u64, type u32, buffer u64, ne u32x4, nb u32x4, op u32,
# op_params i32x16, flags i32, src u64x10, view_src u64, view_offs u64, data u64,
# name char[64], use_count i32.
_TENSOR = struct.Struct("<QIQ4I4II16ii10QQQQ64si")
assert _TENSOR.size == 296


# -- the wire protocol (a client small enough to probe a helper safely) -----------------------


class RpcWire:
    """One connection to an rpc-server: request = cmd u8 | size u64 | data; reply = size u64 | data."""

    def __init__(self, endpoint: str, timeout: float = 3.0) -> None:
        self.endpoint = endpoint
        host, port = split_endpoint(endpoint)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            why = "nothing listens there" if isinstance(exc, ConnectionRefusedError) else str(exc)
            raise HelperUnreachable(f"cannot reach the helper at {endpoint}: {why}",
                                    endpoint=endpoint) from exc
        self.timeout = timeout
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            reply = self._hello()
        except HelperUnreachable:
            self.close()
            raise
        major, minor, patch = reply[0], reply[1], reply[2]
        self.version = f"{major}.{minor}.{patch}"
        if major != PROTO_MAJOR:
            self.close()
            raise HelperUnreachable(
                f"the helper at {endpoint} speaks RPC protocol {self.version}; this llama.cpp "
                f"speaks {PROTO_MAJOR}.x", endpoint=endpoint,
                hint="Install the same pocketchat and llama-cpp-python version on both machines.")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> "RpcWire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, cmd: int, data: bytes = b"") -> None:
        try:
            self.sock.sendall(struct.pack("<BQ", cmd, len(data)) + data)
        except OSError as exc:
            raise HelperUnreachable(f"the helper at {self.endpoint} dropped the connection: {exc}",
                                    endpoint=self.endpoint) from exc

    def call(self, cmd: int, data: bytes, reply_size: int) -> bytes:
        self.send(cmd, data)
        size = struct.unpack("<Q", self._recv(8))[0]
        if size != reply_size:
            raise HelperUnreachable(f"the helper at {self.endpoint} answered {size} bytes, not "
                                    f"{reply_size}: is it llama.cpp's rpc-server?", endpoint=self.endpoint)
        return self._recv(size)

    def _recv(self, n: int) -> bytes:
        data, err = self._read(n)
        if err is not None:
            raise self._silent(err)
        return data

    def _read(self, n: int) -> tuple[bytes, OSError | None]:
        """Up to `n` bytes, and why fewer came (the socket's error, or closed), else None."""
        buf = bytearray()
        while len(buf) < n:
            try:
                part = self.sock.recv(n - len(buf))
            except OSError as exc:  # socket.timeout is a TimeoutError, an OSError
                return bytes(buf), exc
            if not part:
                return bytes(buf), ConnectionResetError("connection closed")
            buf += part
        return bytes(buf), None

    def _silent(self, err: OSError) -> HelperUnreachable:
        return HelperUnreachable(
            f"the helper at {self.endpoint} did not answer ({err}); it serves one client at a "
            "time: is another pocketchat using it?", endpoint=self.endpoint)

    # -- HELLO: is this an RPC server, and a free one? ----------------------------------------

    def _hello(self) -> bytes:
        """HELLO's reply; HelperUnreachable that tells a busy helper from a server that is none."""
        self.send(HELLO, bytes(CONN_CAPS_SIZE))
        head, err = self._read(8)
        if err is None:
            size = struct.unpack("<Q", head)[0]
            if 3 <= size <= HELLO_REPLY_SIZE:  # an rpc-server, of this version or an older one
                return self._recv(size)
            raise self._not_rpc(head)
        if head or isinstance(err, ConnectionError):  # a few bytes, or it hung up at once
            raise self._not_rpc(head) from err
        if isinstance(err, TimeoutError):
            answer = self._nudge()
            if answer is not None:
                raise self._not_rpc(answer) from err
        raise self._silent(err) from err

    def _nudge(self) -> bytes | None:
        """What a silent server answers to a line (b"": it hung up); None while it stays silent."""
        try:
            self.sock.sendall(NUDGE)
            self.sock.settimeout(min(self.timeout, NUDGE_WAIT_S))
            return self.sock.recv(64)
        except TimeoutError:
            return None
        except OSError:
            return b""

    def _not_rpc(self, answer: bytes) -> HelperUnreachable:
        http = answer.startswith(b"HTTP/") or answer.lstrip().lower().startswith((b"<!doctype", b"<html"))
        what = ("it answers HTTP" if http else
                "it answers in another protocol" if answer else "it hung up at the RPC greeting")
        hint = (f"Check HOST:PORT: on the helper machine, `pocketchat rpc-server` prints the "
                f"address to give --rpc (port {DEFAULT_PORT} unless --port says otherwise).")
        if not answer:
            hint += " If it is one, install the same pocketchat and llama-cpp-python version on both machines."
        return HelperUnreachable(f"the helper at {self.endpoint} is not a pocketchat/llama.cpp RPC "
                                 f"server ({what})", endpoint=self.endpoint, hint=hint)

    # -- commands ----------------------------------------------------------------------------

    def device_count(self) -> int:
        return struct.unpack("<I", self.call(DEVICE_COUNT, b"", 4))[0]

    def device_memory(self, device: int = 0) -> tuple[int, int]:
        free, total = struct.unpack("<QQ", self.call(GET_DEVICE_MEMORY, struct.pack("<I", device), 16))
        return free, total

    def upload_seconds(self, size: int) -> float | None:
        """Seconds to send `size` bytes into a scratch buffer on device 0 (None: no buffer)."""
        ptr, got = struct.unpack("<QQ", self.call(ALLOC_BUFFER, struct.pack("<IQ", 0, size), 16))
        if not ptr or got < size:
            return None
        try:
            base = struct.unpack("<Q", self.call(BUFFER_GET_BASE, struct.pack("<Q", ptr), 8))[0]
            ne, nb = (size, 1, 1, 1), (1, size, size, size)
            tensor = _TENSOR.pack(1, GGML_TYPE_I8, ptr, *ne, *nb, 0, *([0] * 16), 0,
                                  *([0] * 10), 0, 0, base, b"probe", 0)
            payload = tensor + struct.pack("<BQ", 0, 0) + bytes(size)
            start = time.perf_counter()
            self.send(SET_TENSOR, payload)
            self.call(GET_ALIGNMENT, struct.pack("<I", 0), 8)  # returns once the data is in
            return time.perf_counter() - start
        finally:
            self.send(FREE_BUFFER, struct.pack("<Q", ptr))


def probe_helper(endpoint: str, *, timeout: float = 3.0, payload: int = PROBE_PAYLOAD) -> Helper:
    """Ask the helper for its memory and measure the link; HelperUnreachable when it cannot."""
    with RpcWire(endpoint, timeout) as wire:
        n = wire.device_count()
        if n == 0:
            raise HelperUnreachable(f"the helper at {endpoint} offers no device", endpoint=endpoint)
        mem = [wire.device_memory(i) for i in range(n)]
        rtts = []
        for _ in range(5):
            start = time.perf_counter()
            wire.device_memory(0)
            rtts.append(time.perf_counter() - start)
        rtt = sorted(rtts)[len(rtts) // 2]
        seconds = wire.upload_seconds(payload) if payload else None
    throughput = payload / max(seconds - rtt, 1e-6) if seconds else None
    free = sum(f for f, _ in mem)
    total = sum(t for _, t in mem)
    return Helper(endpoint=endpoint, free_bytes=free, total_bytes=total, n_devices=n,
                  rtt_seconds=rtt, throughput_bytes_s=throughput,
                  reports_total_as_free=all(f == t for f, t in mem))


def reachable(endpoint: str, timeout: float = 1.5) -> str | None:
    """None when the helper answers HELLO, else why not."""
    try:
        RpcWire(endpoint, timeout).close()
        return None
    except HelperUnreachable as exc:
        return exc.message
