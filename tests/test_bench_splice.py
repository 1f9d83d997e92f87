"""bench/splice.py, the Python bound of the sustained section, on loopback (on uvloop, as the
bench runs it, and on asyncio's own loop): bytes both ways as they came, what a client sends
before its upstream connection is open, and a close on either side closing the other."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvloop

from bench.splice import serve

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Run:
    return uvloop.run if request.param == "uvloop" else asyncio.run  # type: ignore[return-value]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to a server that may still be starting."""
    for _ in range(200):
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
    raise AssertionError(f"nothing listens on {port}")


@asynccontextmanager
async def spliced(upstream: bool = True) -> AsyncIterator[tuple[int, int, list[bytes]]]:
    """The splice's port, the upstream's, and what the upstream read: it answers each read
    with `got:` and the bytes, and closes on `bye`. No upstream listens when not `upstream`."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            received.append(data)
            if data == b"bye":
                break
            writer.write(b"got:" + data)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    up = server.sockets[0].getsockname()[1]
    if not upstream:
        server.close()
        await server.wait_closed()
    port = free_port()
    task = asyncio.create_task(serve(port, ("127.0.0.1", up)))
    try:
        if upstream:
            _, writer = await connect(port)  # the splice is up
            writer.close()
        yield port, up, received
    finally:
        task.cancel()
        server.close()


async def read_to_end(reader: asyncio.StreamReader) -> bytes:
    try:  # a close with bytes left unread is a reset
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        return b""


def test_bytes_go_both_ways_as_they_came(run: Run) -> None:
    async def scenario() -> None:
        async with spliced() as (port, _, received):
            reader, writer = await connect(port)
            # Sent at once: the splice may read it before its upstream connection is open.
            payload = b"POST /v1 HTTP/1.1\r\n\r\n\x00\xff" + bytes(range(256)) * 64
            writer.write(payload)
            answer = await asyncio.wait_for(reader.readexactly(len(payload) + 4), 5)
            assert answer[:4] == b"got:"
            assert b"".join(received) == answer[4:] == payload
            writer.write(b"again")
            assert await asyncio.wait_for(reader.readexactly(9), 5) == b"got:again"
            writer.close()

    run(scenario())


def test_the_upstream_closing_closes_the_client(run: Run) -> None:
    async def scenario() -> None:
        async with spliced() as (port, _, received):
            reader, writer = await connect(port)
            writer.write(b"bye")
            assert await read_to_end(reader) == b""
            assert received == [b"bye"]
            writer.close()

    run(scenario())


def test_the_client_closing_closes_the_upstream(run: Run) -> None:
    async def scenario() -> None:
        async with spliced() as (port, up, received):
            _, writer = await connect(port)
            writer.write(b"one")  # and gone at once: still delivered, then the close
            writer.close()
            await writer.wait_closed()
            for _ in range(500):
                if received == [b"one"] and not established_to(up):
                    break
                await asyncio.sleep(0.01)
            assert received == [b"one"]
            assert not established_to(up)

    run(scenario())


def test_no_upstream_closes_the_client(run: Run) -> None:
    async def scenario() -> None:
        async with spliced(upstream=False) as (port, _, _):
            reader, writer = await connect(port)
            writer.write(b"hello")
            assert await read_to_end(reader) == b""
            writer.close()

    run(scenario())


def established_to(port: int) -> bool:
    """Whether a TCP connection on this machine is established at local port `port`."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.read().splitlines()[1:]]
    return any(int(row[1].split(":")[1], 16) == port and row[3] == "01" for row in rows)
