"""Fault injection for the test suite, all on loopback.

* `FaultProxy`: a TCP proxy that sits between spillguard and an upstream and misbehaves on
  purpose in the response direction (latency, a bandwidth cap, one byte at a time, a reset, a
  clean close or a stall after N bytes) or in the request direction (it stops reading). It records
  every connection and notices when the client side (spillguard) closes it.
* `RawUpstream`: an HTTP/1.1 server with no framework, whose handler writes the exact bytes of a
  reply (or nothing at all), records what it was sent, and notices when spillguard hangs up.
* Helpers to run spillguard against either and to count what it holds open: sockets, file
  descriptors and the upstream pool's acquired connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self

from spillguard.runner import Running, start_background
from spillguard.scripted import Turn, chunks
from spillguard.settings import Settings

HANG = 20.0  # seconds: a hang guard only, never a performance assertion


# ---- the fault-injecting TCP proxy -------------------------------------------------------------


@dataclass
class Fault:
    latency: float = 0.0  # seconds before each response chunk is forwarded
    bandwidth: int = 0  # bytes per second in the response direction (0: no cap)
    drip: float | None = None  # forward the response one byte at a time, this far apart
    reset_after: int | None = None  # after N response bytes, reset both sides (RST)
    close_after: int | None = None  # after N response bytes, close both sides (FIN)
    stall_after: int | None = None  # after N response bytes, forward nothing more
    stop_reading: bool = False  # never read the request (the client's writes back up)


@dataclass
class Conn:
    """One connection through a FaultProxy (or to a RawUpstream)."""

    opened: float = field(default_factory=time.monotonic)
    up: int = 0  # request bytes received from the client
    down: int = 0  # response bytes sent to the client
    head: bytes = b""  # the first request bytes (request line and headers)
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _listen(rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class _Listener:
    """A loopback TCP server whose connection handlers are tracked (and cancelled on stop)."""

    rcvbuf: int | None = None

    def __init__(self) -> None:
        self.conns: list[Conn] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def open_count(self) -> int:
        return sum(1 for c in self.conns if not c.closed.is_set())

    async def start(self) -> Self:
        sock = _listen(rcvbuf=self.rcvbuf)
        self._server = await asyncio.start_server(self._accept, sock=sock)
        self.port = sock.getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class FaultProxy(_Listener):
    """Forward TCP from 127.0.0.1:<port> to `target`, applying `fault` (changeable at any time:
    each new connection reads it when it opens)."""

    def __init__(self, target_port: int, fault: Fault | None = None) -> None:
        super().__init__()
        self.target_port = target_port
        self.fault = fault or Fault()

    async def start(self) -> Self:
        self.rcvbuf = 4096 if self.fault.stop_reading else None
        return await super().start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn()
        self.conns.append(conn)
        fault = self.fault
        try:
            if fault.stop_reading:
                writer.transport.pause_reading()
                await asyncio.sleep(3600)
                return
            t_reader, t_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            up = asyncio.ensure_future(self._up(conn, reader, t_writer))
            down = asyncio.ensure_future(self._down(conn, fault, t_reader, writer))
            try:
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                if down.done() and not up.done():
                    # The response is over (or was cut): wait for the client to hang up.
                    await up
            finally:
                up.cancel()
                down.cancel()
                for w in (t_writer, writer):
                    w.close()
        except (OSError, asyncio.CancelledError):
            writer.close()
        finally:
            conn.closed.set()
            self._tasks.discard(task)

    async def _up(
        self, conn: Conn, reader: asyncio.StreamReader, t_writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(65536):
                if len(conn.head) < 4096:
                    conn.head += data[: 4096 - len(conn.head)]
                conn.up += len(data)
                t_writer.write(data)
                await t_writer.drain()
        except OSError:
            pass
        conn.client_closed.set()

    async def _down(
        self,
        conn: Conn,
        fault: Fault,
        t_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        cut = min(
            (n for n in (fault.reset_after, fault.close_after, fault.stall_after) if n is not None),
            default=None,
        )
        while data := await t_reader.read(65536):
            if fault.latency:
                await asyncio.sleep(fault.latency)
            if cut is not None:
                data = data[: max(cut - conn.down, 0)]
            if fault.drip is not None:
                step = 1
            elif fault.bandwidth:
                step = max(1, fault.bandwidth // 20)
            else:
                step = max(1, len(data))
            for i in range(0, len(data), step):
                piece = data[i : i + step]
                writer.write(piece)
                await writer.drain()
                conn.down += len(piece)
                if fault.drip is not None:
                    await asyncio.sleep(fault.drip)
                elif fault.bandwidth:
                    await asyncio.sleep(len(piece) / fault.bandwidth)
            if cut is not None and conn.down >= cut:
                if fault.reset_after is not None and cut == fault.reset_after:
                    _rst(writer)
                    return
                if fault.close_after is not None and cut == fault.close_after:
                    writer.close()
                    return
                await asyncio.sleep(3600)  # stall: the client must give up by itself
        writer.close()


# ---- a raw HTTP/1.1 upstream -------------------------------------------------------------------


@dataclass
class RawRequest:
    index: int
    method: str
    target: str
    headers: list[tuple[str, str]]  # names lower-cased, in order, repeats kept
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None


class RawConn:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Conn
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = conn
        self.done = False  # the handler closed or reset the connection

    async def request(self, index: int) -> RawRequest | None:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return None
        if len(self.conn.head) < 4096:
            self.conn.head += head[: 4096 - len(self.conn.head)]
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers.append((key.strip().lower(), value.strip()))
        req = RawRequest(index, method, target, headers, b"")
        length = req.header("content-length")
        if length is not None:
            req.body = await self.reader.readexactly(int(length))
        elif (req.header("transfer-encoding") or "").lower() == "chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
                if size == 0:
                    break
            req.body = b"".join(parts)
        self.conn.up += len(head) + len(req.body)
        return req

    async def send(self, data: bytes) -> None:
        if self.reader.at_eof():
            raise ConnectionResetError("the client hung up")
        self.writer.write(data)
        await self.writer.drain()
        self.conn.down += len(data)

    async def drip(self, data: bytes, every: float) -> None:
        for i in range(len(data)):
            await self.send(data[i : i + 1])
            await asyncio.sleep(every)

    def reset(self) -> None:
        self.done = True
        _rst(self.writer)

    def close(self) -> None:
        self.done = True
        self.writer.close()

    async def until_closed(self) -> None:
        """Answer nothing more; return once the client (spillguard) hangs up."""
        with contextlib.suppress(OSError):
            while await self.reader.read(65536):
                pass
        self.conn.client_closed.set()
        self.close()


Handler = Callable[[RawConn, RawRequest], Awaitable[None]]


class RawUpstream(_Listener):
    """Serve `handler` for every request on 127.0.0.1; keep-alive unless the handler closes."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.requests: list[RawRequest] = []
        self.got_request = asyncio.Event()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn()
        self.conns.append(conn)
        raw = RawConn(reader, writer, conn)
        try:
            while not raw.done:
                req = await raw.request(len(self.requests))
                if req is None:
                    conn.client_closed.set()
                    break
                self.requests.append(req)
                self.got_request.set()
                await self.handler(raw, req)
        except (OSError, asyncio.IncompleteReadError):
            conn.client_closed.set()
        finally:
            writer.close()
            conn.closed.set()
            self._tasks.discard(task)


def head(status: int = 200, headers: dict[str, str] | None = None, **kw: str) -> bytes:
    """A response head; pass `content_length=...` or leave it chunked (the default)."""
    lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Status'}"]
    fields = dict(headers or {})
    for key, value in kw.items():
        fields[key.replace("_", "-")] = value
    if not any(k.lower() in ("content-length", "transfer-encoding") for k in fields):
        fields["transfer-encoding"] = "chunked"
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"
PROSE = "It is sunny in Lisbon today, twenty-one degrees and a light breeze. " * 6
LEAK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'


def events(content: str, *, done: bool = True, size: int = 8) -> list[bytes]:
    """A chat stream as SSE events (the last one [DONE] unless done=False)."""
    out = chunks(Turn(content=content, delta_size=size), "m")
    return out if done else out[:-1]


def completion_bytes(content: str) -> bytes:
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }
    return json.dumps(body).encode()


SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}


async def reply(conn: RawConn, status: int, headers: dict[str, str], body: bytes) -> None:
    """A complete response with a Content-Length."""
    await conn.send(head(status, headers, content_length=str(len(body))) + body)


# ---- spillguard and what it holds open -----------------------------------------------------------


@contextlib.asynccontextmanager
async def serve(upstream: str, **settings: Any) -> AsyncIterator[Running]:
    """spillguard on a free loopback port in front of `upstream`."""
    base: dict[str, Any] = {
        "upstream": upstream,
        "port": 0,
        "log_level": "WARNING",
        "graceful_timeout": 1.0,
    }
    running = await start_background(Settings(**(base | settings)))
    try:
        yield running
    finally:
        await asyncio.wait_for(running.stop(), HANG)


def app_of(running: Running) -> Any:
    """The FastAPI app inside a running server, however uvicorn wrapped it."""
    app: Any = running.server.config.app
    for _ in range(10):
        if hasattr(getattr(app, "state", None), "upstream"):
            return app
        app = getattr(app, "app", None)
    raise AssertionError("no FastAPI app with state.upstream found")


def pool_in_use(running: Running) -> int:
    """Upstream connections spillguard has acquired and not released."""
    return int(app_of(running).state.upstream.open_connections)


def socket_fds() -> int:
    """Open sockets in this process (spillguard, the fake upstreams and the test clients)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
    return count


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def eventually(check: Callable[[], bool], timeout: float = HANG) -> None:
    """Wait until `check()` holds (polling); fail after `timeout` (a hang guard)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def raw_http(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send raw bytes to 127.0.0.1:port and read the reply until the server closes or a full
    response has arrived (Content-Length or chunked end)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await read_response(reader) if read else b""
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> bytes:
    try:
        head_ = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    lower = head_.lower()
    if b"content-length:" in lower:
        n = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        return head_ + await reader.readexactly(n)
    if b"transfer-encoding: chunked" in lower:
        body = b""
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0], 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                return head_ + body
    return head_ + await reader.read()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def error_of(body: bytes | str) -> dict[str, Any]:
    """The `error` object of an OpenAI-shaped error body, checked for shape."""
    obj = json.loads(body)
    assert set(obj) == {"error"}, obj
    error = obj["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and isinstance(error["code"], str)
    return dict(error)


def sse_events(text: str) -> list[str]:
    """The data payloads of an SSE body (comments dropped)."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out
