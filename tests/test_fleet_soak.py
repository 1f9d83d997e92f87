"""The fleet soak's own logic (bench/fleet_soak.py), without running it: the round-robin front,
and the checks of the incident record and of `incidents stats` against what was sent."""

from __future__ import annotations

import asyncio

from bench.fleet_soak import (
    MIX,
    Sent,
    expected_stats,
    recorded_problems,
    serve_front,
    stats_problems,
)
from bench.soak import free_port

KIND = {k.name: k for k in MIX}


def sent(**ids: str) -> Sent:
    return Sent(kinds={rid: KIND[name] for rid, name in ids.items()})


SENT = sent(a="benign", b="leak-retried", c="leak-502", d="leak-502-stream", e="upstream-429")
RIGHT = [
    ("b", 1, "retried", 1),
    *(("c", 1, "failed", 1), ("c", 2, "failed", 1)),
    *(("d", 1, "failed", 1), ("d", 2, "failed", 1)),
]


def test_a_record_of_every_leaked_attempt_once_passes() -> None:
    assert recorded_problems(SENT, RIGHT) == []


def test_a_record_missing_doubled_or_foreign_is_caught() -> None:
    missing = [r for r in RIGHT if r[:2] != ("c", 2)]
    assert len(recorded_problems(SENT, missing)) == 1
    doubled = [("b", 1, "retried", 2), *RIGHT[1:]]
    assert len(recorded_problems(SENT, doubled)) == 1
    wrong = [("b", 1, "failed", 1), *RIGHT[1:]]
    assert len(recorded_problems(SENT, wrong)) == 1
    benign = [*RIGHT, ("a", 1, "passed", 1)]
    assert len(recorded_problems(SENT, benign)) == 1
    foreign = [*RIGHT, ("z", 1, "retried", 1)]
    assert recorded_problems(SENT, foreign) == ["z: recorded, never sent"]


def test_stats_must_count_what_was_sent() -> None:
    want = expected_stats(SENT)
    # Whole replies bill 10 in and 5 out per leaked attempt; the streamed ones say nothing.
    assert want == {
        ("leak-once", "hermes"): {
            "incidents": 1,
            "requests": 1,
            "input_tokens": 10,
            "output_tokens": 5,
        },
        ("leak-always", "hermes"): {
            "incidents": 4,
            "requests": 2,
            "input_tokens": 20,
            "output_tokens": 10,
        },
    }
    rows = [
        {"model": model, "kind": "leak", "family": family, **counts, "first": "", "last": ""}
        for (model, family), counts in want.items()
    ]
    assert stats_problems(SENT, rows) == []
    short = [rows[0], {**rows[1], "incidents": 3}]
    assert len(stats_problems(SENT, short)) == 1
    assert len(stats_problems(SENT, rows[:1])) == 1
    odd = {**rows[0], "kind": "undeclared_tool"}
    assert len(stats_problems(SENT, [*rows, odd])) == 1


async def test_the_front_sends_each_connection_to_the_next_replica() -> None:
    async def named(name: bytes) -> asyncio.Server:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(name + await reader.readexactly(4))
            await writer.drain()
            writer.close()

        return await asyncio.start_server(answer, "127.0.0.1", 0)

    replicas = [await named(b"one:"), await named(b"two:")]
    ports = [s.sockets[0].getsockname()[1] for s in replicas]
    port = free_port()
    front = await serve_front(port, ports)
    got = []
    for i in range(4):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ask%d" % i)
        await writer.drain()
        got.append(await reader.read())  # to the end: the replica closed, so the front did
        writer.close()
    front.close()
    for server in replicas:
        server.close()
    assert got == [b"one:ask0", b"two:ask1", b"one:ask2", b"two:ask3"]
