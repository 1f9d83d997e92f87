"""Python's own limit as a relay: a TCP forwarder on uvloop that parses nothing.

Each client connection gets its own upstream connection, and every read from one side is
written to the other as it came: no HTTP parsing, no SSE, no framework, no task a read. No
Python proxy that reads each upstream piece does less, so what this row holds in the
sustained section bounds what any of them can (nginx's row is the same bound for a proxy
in C).

Run it with `python -m bench.splice --upstream-port 9100 --port 9209`.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast


class _Side(asyncio.Protocol):
    """One socket of a pair: what it reads goes to `peer`; when the peer's buffer is full this
    side stops reading until it drains."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """The client's socket: what it sends before its upstream connection is open is kept
    (uvloop may read once more after `pause_reading` in `connection_made`)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream
        self.early: list[bytes] = []
        self.task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._connect())

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early.append(data)
        else:
            super().data_received(data)

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            transport, up = await loop.create_connection(_Side, *self.upstream)
        except OSError:
            self.transport.close()
            return
        # uvloop may call `connection_made` a turn later than the connection is handed here.
        up.transport = transport
        up.peer, self.peer = self, up
        transport.write(b"".join(self.early))
        self.early.clear()
        if self.transport.is_closing():  # gone already: its bytes go first, then the close
            transport.close()
            return
        self.transport.resume_reading()


async def serve(port: int, upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9209)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--upstream-port", type=int, default=9100)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.port, (args.upstream_host, args.upstream_port)))


if __name__ == "__main__":
    main()
