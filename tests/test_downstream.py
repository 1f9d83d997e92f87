"""The client's side (`downstream.py`): the body under its deadline and limit, and a client
that leaves while the upstream is still answering."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from spillguard import downstream
from spillguard.downstream import ClientGone, read_body, until_disconnect
from spillguard.errors import ClientError


def _receiver(messages: list[dict[str, Any]], then_wait: bool = True) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        if then_wait:
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    return receive


async def test_the_body_is_read_whole_from_its_parts() -> None:
    parts = [
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
    ]
    assert await read_body(_receiver(parts), "", 100, 5) == b'{"a":1}'


async def test_one_part_is_returned_as_it_came() -> None:
    body = b"x" * 10
    receive = _receiver([{"type": "http.request", "body": body}])
    assert await read_body(receive, "10", 100, 5) is body


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("read")

    with pytest.raises(ClientError) as caught:
        await read_body(receive, "101", 100, 5)
    assert caught.value.status == 413


async def test_a_body_that_grows_over_the_limit_is_refused() -> None:
    parts = [{"type": "http.request", "body": b"x" * 60, "more_body": True}] * 2
    with pytest.raises(ClientError) as caught:
        await read_body(_receiver(parts), "", 100, 5)
    assert caught.value.status == 413


async def test_a_body_that_stops_coming_is_a_408_and_the_task_is_not_left_cancelled() -> None:
    parts = [{"type": "http.request", "body": b"x", "more_body": True}]
    with pytest.raises(ClientError) as caught:
        await read_body(_receiver(parts), "", 100, 0.05)
    assert caught.value.status == 408
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # the task goes on normally


async def test_a_client_that_leaves_mid_body_is_a_disconnect() -> None:
    parts = [{"type": "http.request", "body": b"x", "more_body": True}]
    with pytest.raises(ClientDisconnect):
        await read_body(_receiver(parts, then_wait=False), "", 100, 5)


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    async def reader() -> bytes:
        return await read_body(_receiver([]), "", 100, 5)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_quick_reply_never_watches_the_client() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("watched")

    async def work() -> str:
        return "done"

    assert await until_disconnect(receive, work()) == "done"


async def test_a_client_gone_during_a_slow_reply_cancels_it(monkeypatch: Any) -> None:
    monkeypatch.setattr(downstream, "WATCH_AFTER", 0.01)
    cancelled = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    with pytest.raises(ClientGone):
        await until_disconnect(_receiver([], then_wait=False), work())
    assert cancelled.is_set()


async def test_a_client_that_stays_sees_the_slow_reply(monkeypatch: Any) -> None:
    monkeypatch.setattr(downstream, "WATCH_AFTER", 0.01)

    async def work() -> str:
        await asyncio.sleep(0.05)
        return "slow"

    assert await until_disconnect(_receiver([]), work()) == "slow"
