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
    """One socket of a pair: what it reads is written to `peer`, the other socket's transport,
    and when this socket's buffer is full the peer stops reading until it drains. A client's
    `peer` is None while its upstream connection opens; what it sends meanwhile is kept
    (uvloop may read once more after `pause_reading` in `connection_made`)."""

    def __init__(self, peer: asyncio.Transport | None) -> None:
        self.peer = peer
        self.early: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.write(data)
        else:
            self.early.append(data)

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


class _Client(_Side):
    """The client's socket, unread until its upstream connection is open."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(None)
        self.upstream = upstream
        self.task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        client.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._connect(client))

    async def _connect(self, client: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            up, _ = await loop.create_connection(lambda: _Side(client), *self.upstream)
        except OSError:
            client.close()
            return
        self.peer = up
        up.write(b"".join(self.early))
        self.early.clear()
        if client.is_closing():  # gone already: its bytes go first, then the close
            up.close()
            return
        client.resume_reading()


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
