"""An upstream reply being read: `Reply`'s bounded waits and the exchange's one total deadline
(`Deadline`), headers and body alike, against raw upstreams on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from spillguard.errors import UpstreamTimeout
from spillguard.reply import BOUND, DEADLINE, IDLE, Deadline
from spillguard.settings import Settings
from spillguard.upstream import Upstream


async def _paced_server(gap: float) -> tuple[asyncio.AbstractServer, str]:
    """A raw HTTP/1.1 upstream: the headers and `first`, then `second` after `gap` seconds."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 12\r\n\r\n")
        writer.write(b"first.")
        await writer.drain()
        await asyncio.sleep(gap)
        writer.write(b"second")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def test_a_wait_that_times_out_loses_nothing_and_the_next_wait_reads_on() -> None:
    server, url = await _paced_server(0.3)
    upstream = Upstream(Settings(upstream=url))
    await upstream.start()
    try:
        reply = await upstream.open("GET", upstream.url("x", ""), {}, None)
        got, nones = [], 0
        while True:
            piece = await reply.wait_chunk(0.05)
            if piece is None:
                nones += 1
                continue
            if not piece:
                break
            got.append(piece)
        reply.close()
        assert b"".join(got) == b"first.second"
        assert nones >= 1
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
    finally:
        await upstream.close()
        server.close()


async def _ends_cancelled(work: Coroutine[Any, Any, object], after: float) -> None:
    """`work`, run as a task and cancelled from outside `after` seconds on, ends cancelled."""
    task = asyncio.create_task(work)
    await asyncio.sleep(after)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_from_outside_during_a_wait_is_a_cancel() -> None:
    server, url = await _paced_server(5)
    upstream = Upstream(Settings(upstream=url))
    await upstream.start()
    try:
        reply = await upstream.open("GET", upstream.url("x", ""), {}, None)
        assert await reply.wait_chunk(1) == b"first."

        await _ends_cancelled(reply.wait_chunk(0.05), after=0.02)
        reply.close()
    finally:
        await upstream.close()
        server.close()


async def _silent_server() -> tuple[asyncio.Server, str]:
    """Reads a request and never answers it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(30)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def test_a_whole_exchange_whose_headers_miss_the_deadline_is_a_timeout() -> None:
    server, url = await _silent_server()
    upstream = Upstream(Settings(upstream=url, total_timeout=0.2))
    await upstream.start()
    try:
        with pytest.raises(UpstreamTimeout, match="did not answer in time"):
            await upstream.open("GET", upstream.url("x", ""), {}, None)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0.3)  # nothing left to ring
    finally:
        await upstream.close()
        server.close()


@asynccontextmanager
async def _paced_upstream(pace: float, total_timeout: float) -> AsyncIterator[Upstream]:
    """An upstream in front of `_paced_server(pace)`, under this total deadline."""
    server, url = await _paced_server(pace)
    upstream = Upstream(Settings(upstream=url, total_timeout=total_timeout))
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.close()
        server.close()


async def test_a_whole_exchange_whose_body_misses_the_deadline_is_a_timeout() -> None:
    async with _paced_upstream(5, 0.3) as upstream:
        async with await upstream.open("GET", upstream.url("x", ""), {}, None) as r:
            with pytest.raises(UpstreamTimeout, match="exceeded the total deadline"):
                await r.read(1000)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0


async def test_a_whole_exchange_read_in_time_leaves_no_deadline_behind() -> None:
    async with _paced_upstream(0.05, 0.3) as upstream:
        async with await upstream.open("GET", upstream.url("x", ""), {}, None) as r:
            assert await r.read(1000) == b"first.second"
        await asyncio.sleep(0.5)  # past the deadline: this task is not cancelled
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0


async def test_a_cancel_from_outside_during_a_whole_read_is_a_cancel() -> None:
    async with _paced_upstream(5, 0.3) as upstream:

        async def reading() -> bytes:
            async with await upstream.open("GET", upstream.url("x", ""), {}, None) as r:
                return await r.read(1000)

        await _ends_cancelled(reading(), after=0.1)


async def test_a_deadline_that_rings_with_an_outside_cancel_is_a_cancel() -> None:
    """Both cancel the waiting task before it runs again: `ended_by` takes the deadline's
    cancel back but says 0, so the task's CancelledError goes on as the outside one."""
    seen: list[int] = []
    made: list[Deadline] = []

    async def waiting() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        deadline = Deadline(loop, loop.time() + 30)
        made.append(deadline)
        deadline.begin(task)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(deadline.ended_by(task))
            raise
        finally:
            deadline.end(task)
            deadline.cancel()

    task = asyncio.create_task(waiting())
    await asyncio.sleep(0)
    task.cancel()
    made[0].when = 0  # due: it ends the wait, as its timer would in the same turn of the loop
    made[0]._fire()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [0]


async def test_the_timer_ends_a_wait_for_its_bound_or_the_deadline_and_says_which() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    deadline = Deadline(loop, loop.time() + 0.3)
    try:
        deadline.begin(task, loop.time() + 0.05)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(5)
        assert deadline.ended_by(task) == BOUND
        deadline.end(task)
        assert not deadline.passed
        deadline.begin(task, loop.time() + 5)  # a bound past the deadline: the deadline ends it
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(5)
        assert deadline.ended_by(task) == DEADLINE
        deadline.end(task)
        assert deadline.passed and task.cancelling() == 0
        with pytest.raises(UpstreamTimeout, match="total deadline"):
            deadline.begin(task)  # every wait after it fails at once
    finally:
        deadline.cancel()


async def test_the_timer_ends_a_wait_for_silence_counted_from_the_last_byte_heard() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    deadline = Deadline(loop, loop.time() + 5, idle=0.1)
    try:
        deadline.begin(task, loop.time() + 5)

        async def heard_later() -> None:
            await asyncio.sleep(0.06)
            deadline.heard = loop.time()  # a byte read within the wait: silence starts again

        hearing = asyncio.create_task(heard_later())
        began = loop.time()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(5)
        assert loop.time() - began >= 0.15  # from the byte heard, not from the wait's start
        assert deadline.ended_by(task) == IDLE
        deadline.end(task)
        assert not deadline.passed and task.cancelling() == 0
        await hearing
    finally:
        deadline.cancel()


async def test_a_deadline_that_comes_between_waits_cancels_nothing() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    deadline = Deadline(loop, loop.time() + 0.05)
    await asyncio.sleep(0.2)  # not waiting on the upstream: this task is not cancelled
    assert deadline.passed and task.cancelling() == 0
    with pytest.raises(UpstreamTimeout):
        deadline.begin(task)


# ---- the total deadline of a streamed reply (read in pieces, bounded waits) ------------------


async def test_a_stream_whose_headers_miss_the_deadline_is_a_timeout_and_closes() -> None:
    closed = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.read()  # until spillguard hangs up
        closed.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    upstream = Upstream(Settings(upstream=url, total_timeout=0.2, read_timeout=30))
    await upstream.start()
    try:
        with pytest.raises(UpstreamTimeout, match="did not answer in time"):
            await upstream.open("POST", upstream.url("x", ""), {}, b"{}", decode=True)
        await _left_clean(upstream, closed)
    finally:
        await upstream.close()
        server.close()


async def _left_clean(upstream: Upstream, closed: asyncio.Event) -> None:
    """The task is not left cancelled, the upstream saw its connection closed, and the pool
    holds none."""
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.wait_for(closed.wait(), 5)
    assert upstream.open_connections == 0


async def _hangs_up(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the client hangs up within `within` seconds (what else it sends is dropped)."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(1024):
                pass
        return True
    except TimeoutError:
        return False


async def _stream_server(pieces: int, gap: float) -> tuple[asyncio.Server, str, asyncio.Event]:
    """A chunked SSE upstream: `pieces` events `gap` seconds apart; the event is set when the
    client hangs up."""
    closed = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        try:
            for n in range(pieces):
                event = b"data: %d\n\n" % n
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                if await _hangs_up(reader, gap):
                    break
            else:
                writer.write(b"0\r\n\r\n")
                await reader.read()
        except ConnectionError:
            pass
        closed.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", closed


@pytest.mark.parametrize("bound", [None, 10.0])
async def test_a_stream_whose_deadline_comes_mid_body_is_a_timeout_and_closes(
    bound: float | None,
) -> None:
    """Waiting with no bound or one past the deadline, the deadline ends the wait."""
    server, url, closed = await _stream_server(100, 0.05)
    upstream = Upstream(Settings(upstream=url, total_timeout=0.4, read_timeout=30))
    await upstream.start()
    try:
        got = []
        with pytest.raises(UpstreamTimeout, match="exceeded the total deadline"):
            async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
                while piece := await reply.wait_chunk(bound):
                    got.append(piece)
        assert got and b"".join(got).startswith(b"data: 0\n\n")
        await _left_clean(upstream, closed)
    finally:
        await upstream.close()
        server.close()


async def test_a_stream_past_its_deadline_reads_nothing_more_even_when_buffered() -> None:
    """The deadline comes while the reader is busy elsewhere (a slow client): the next wait
    fails at once, though the upstream's bytes are already here."""
    server, url, closed = await _stream_server(100, 0.01)
    upstream = Upstream(Settings(upstream=url, total_timeout=0.2, read_timeout=30))
    await upstream.start()
    try:
        async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
            assert await reply.chunk()
            await asyncio.sleep(0.4)  # past the deadline, the rest of the stream buffered
            with pytest.raises(UpstreamTimeout, match="exceeded the total deadline"):
                await reply.wait_chunk(1)
            with pytest.raises(UpstreamTimeout, match="exceeded the total deadline"):
                await reply.chunk()
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await upstream.close()
        server.close()


async def test_a_bound_that_ends_a_wait_leaves_the_deadline_standing() -> None:
    """Bounded waits that time out (keep-alives) move the timer; the deadline still holds."""
    server, url, closed = await _stream_server(2, 5)
    upstream = Upstream(Settings(upstream=url, total_timeout=0.5, read_timeout=30))
    await upstream.start()
    try:
        nones = 0
        with pytest.raises(UpstreamTimeout, match="exceeded the total deadline"):
            async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
                while (piece := await reply.wait_chunk(0.05)) != b"":
                    nones += piece is None
        assert nones >= 3
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await upstream.close()
        server.close()


async def test_silence_past_the_read_timeout_ends_a_stream_whose_waits_keep_ending() -> None:
    """Keep-alive bounds end wait after wait; the silence still counts from the last byte heard,
    so the read-idle timeout ends the stream long before the total deadline."""
    server, url, closed = await _stream_server(2, 5)
    upstream = Upstream(Settings(upstream=url, total_timeout=30, read_timeout=0.3))
    await upstream.start()
    try:
        nones = 0
        async with asyncio.timeout(3):
            with pytest.raises(UpstreamTimeout, match="stopped sending"):
                async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
                    while (piece := await reply.wait_chunk(0.05)) != b"":
                        nones += piece is None
        assert nones >= 3
        await _left_clean(upstream, closed)
    finally:
        await upstream.close()
        server.close()


@pytest.mark.parametrize("whole", [True, False])
async def test_a_body_that_keeps_coming_outlasts_the_read_timeout(whole: bool) -> None:
    """Pieces 0.1 s apart for a second, with a 0.3 s read timeout: each piece heard moves the
    silence on, in one whole read as in a wait a piece."""
    server, url, _closed = await _stream_server(10, 0.1)
    upstream = Upstream(Settings(upstream=url, total_timeout=30, read_timeout=0.3))
    await upstream.start()
    try:
        async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
            if whole:
                body = await reply.read(10_000)
            else:
                body = b"".join([piece async for piece in reply.iter_raw()])
        assert body == b"".join(b"data: %d\n\n" % n for n in range(10))
    finally:
        await upstream.close()
        server.close()


async def test_a_silent_upstream_is_a_timeout_at_the_read_timeout() -> None:
    """No response head within the read timeout, well before the total deadline."""
    server, url = await _silent_server()
    upstream = Upstream(Settings(upstream=url, total_timeout=30, read_timeout=0.2))
    await upstream.start()
    try:
        async with asyncio.timeout(3):
            with pytest.raises(UpstreamTimeout, match="did not answer in time"):
                await upstream.open("GET", upstream.url("x", ""), {}, None)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
    finally:
        await upstream.close()
        server.close()


def test_an_exchange_head_sets_one_timer_on_uvloop() -> None:
    """The timer is armed where the wait for the response head may end (the read timeout,
    before the total deadline), and that wait does not set it again: uvloop's
    `TimerHandle.when()` may read a hair past the time it was set for. (uvloop may also move
    its clock on as it sets a timer, so a rare head sets a second one; without the slack about
    half of them did.)"""
    import uvloop

    async def timers_a_head() -> float:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        calls = 0
        call_at = loop.call_at

        def counted(when: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
            nonlocal calls
            calls += 1
            return call_at(when, callback, *args)

        loop.call_at = counted  # type: ignore[method-assign, assignment]
        for n in range(200):
            deadline = Deadline(loop, loop.time() + 600 + n * 0.001, 120 + n * 0.0007)
            deadline.begin(task)
            deadline.end(task)
            deadline.cancel()
            await asyncio.sleep(0)
        return calls / 200

    assert uvloop.run(timers_a_head()) <= 1.05


async def test_bytes_that_came_while_the_reader_was_busy_are_read_before_the_read_timeout() -> None:
    """The reader is away past the read timeout (a slow client) while the upstream keeps
    sending: the next wait reads what is buffered, and the stream reads on to its end."""
    server, url, _closed = await _stream_server(20, 0.05)
    upstream = Upstream(Settings(upstream=url, total_timeout=30, read_timeout=0.3))
    await upstream.start()
    try:
        async with await upstream.open("POST", upstream.url("x", ""), {}, b"{}") as reply:
            got = [await reply.chunk()]
            await asyncio.sleep(0.5)  # busy elsewhere, past the read timeout
            while (piece := await reply.wait_chunk(1)) != b"":
                assert piece is not None
                got.append(piece)
        assert b"".join(got) == b"".join(b"data: %d\n\n" % n for n in range(20))
    finally:
        await upstream.close()
        server.close()
