"""Chaining after a spliced Responses stream (issue 12, item 3).

The request rewrite (`responses.chain_request`) is fed bytes; end to end, spillguard runs in
front of the stateful scripted provider (tests/clients/provider.py): with one process the splice
is remembered and a later request reaches the upstream naming what the client received; with
more processes (no map every replica can read) a stored response is never spliced: the leak
after published prose fails as an error event, unretried, while `store: false` still splices.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest_asyncio

from spillguard.idmap import LocalIdMap, Spliced
from spillguard.responses import chain_request
from spillguard.scripted import Turn, call
from tests.clients.provider import Stack

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
PROSE = "Let me look that up.\n"
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
CLIENT_COPY = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": PROSE, "annotations": []}],
}


def spliced_map() -> LocalIdMap:
    ids = LocalIdMap(shared=True)
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    ids.put(Spliced("resp_1", "resp_2", {"msg_1": CLIENT_COPY, "rs_1": reasoning}))
    return ids


# ---- the rewrite, on bytes -------------------------------------------------------------------


def test_previous_response_id_names_the_retry_and_every_other_byte_stays() -> None:
    raw = b'{"model":"m", "previous_response_id" : "resp_1","n":1e400,"input":[{"x":1.50}]}'
    got = chain_request(raw, json.loads(raw), spliced_map())
    assert got is not None
    assert (
        got[0] == b'{"model":"m", "previous_response_id" : "resp_2","n":1e400,"input":[{"x":1.50}]}'
    )
    assert got[1]["previous_response_id"] == "resp_2"


def test_item_references_become_the_items_as_the_client_received_them() -> None:
    raw = (
        b'{"input": [ {"role":"user","content":"Lisbon?"}, {"type":"item_reference","id":"msg_1"},'
        b' {"id":"rs_1"}, {"type":"item_reference","id":"fc_2"}, {"type":"function_call_output",'
        b'"call_id":"call_1","output":"21.0"}], "model": "m"}'
    )
    got = chain_request(raw, json.loads(raw), spliced_map())
    assert got is not None
    body = json.loads(got[0])
    assert body["input"] == [
        {"role": "user", "content": "Lisbon?"},
        {"role": "assistant", "content": PROSE},  # the text the client has, never the markup
        # the reasoning item has no valid form without its upstream id: left out
        {"type": "item_reference", "id": "fc_2"},  # the retry's own item: the upstream has it
        {"type": "function_call_output", "call_id": "call_1", "output": "21.0"},
    ]
    assert b'"output":"21.0"}]' in got[0]  # items it keeps are the client's own bytes
    assert got[1] == body


def test_a_request_naming_no_splice_is_left_alone() -> None:
    for raw in (
        b'{"previous_response_id":"resp_9","input":[{"type":"item_reference","id":"msg_9"}]}',
        b'{"input":"hello"}',
        b'{"previous_response_id":null}',
    ):
        assert chain_request(raw, json.loads(raw), spliced_map()) is None


# ---- end to end ------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def stack() -> AsyncIterator[Stack]:
    running = await Stack().start(one={}, workers={"workers": 2})
    yield running
    await running.stop()


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


async def stream(base: str, model: str, **extra: Any) -> list[dict[str, Any]]:
    body = {"model": model, "input": "Weather in Lisbon?", "tools": TOOLS, "stream": True}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        r = await http.post("/responses", json=body | extra)
    assert r.status_code == 200
    return events(r.text)


async def test_one_process_remembers_the_splice_for_the_next_request(stack: Stack) -> None:
    case = stack.provider.add("one", (Turn(content=PROSE + HERMES, delay=0.01), REAL, REAL))
    got = await stream(stack.url("one"), "one")
    completed = got[-1]["response"]
    assert got[-1]["type"] == "response.completed"
    message, fc = completed["output"]
    assert message["content"][0]["text"] == PROSE
    follow = {"model": "one", "tools": TOOLS, "previous_response_id": completed["id"]}
    follow["input"] = [
        {"type": "item_reference", "id": message["id"]},
        {"type": "function_call_output", "call_id": fc["call_id"], "output": "21"},
    ]
    async with httpx.AsyncClient(base_url=stack.url("one"), timeout=30) as http:
        r = await http.post("/responses", json=follow)
    assert r.status_code == 200, r.text
    sent = case.requests[2]["body"]
    assert sent["previous_response_id"] != completed["id"]  # the retry's response, not the leak
    assert sent["input"][0] == {"role": "assistant", "content": PROSE}
    seen = case.seen[2]
    assert seen is not None and seen.previous is not None
    assert fc["call_id"] in {i.get("call_id") for i in seen.previous}


async def test_a_next_turn_without_tools_is_rewritten_too(stack: Stack) -> None:
    # Not inspected (no tools), yet it names the spliced response: it must reach the upstream
    # naming the retry's response, which holds the call the client answers.
    case = stack.provider.add("bare", (Turn(content=PROSE + HERMES, delay=0.01), REAL, REAL))
    got = await stream(stack.url("one"), "bare")
    completed = got[-1]["response"]
    _, fc = completed["output"]
    follow = {"model": "bare", "previous_response_id": completed["id"]}
    follow["input"] = [{"type": "function_call_output", "call_id": fc["call_id"], "output": "21"}]
    async with httpx.AsyncClient(base_url=stack.url("one"), timeout=30) as http:
        r = await http.post("/responses", json=follow)
    assert r.status_code == 200, r.text
    sent = case.requests[2]["body"]
    assert sent["previous_response_id"] != completed["id"]
    seen = case.seen[2]
    assert seen is not None and seen.previous is not None
    assert fc["call_id"] in {i.get("call_id") for i in seen.previous}


async def test_more_processes_never_splice_a_stored_response(stack: Stack) -> None:
    case = stack.provider.add("stored", (Turn(content=PROSE + HERMES, delay=0.01), REAL))
    got = await stream(stack.url("workers"), "stored")
    text = "".join(e["delta"] for e in got if e["type"] == "response.output_text.delta")
    assert text == PROSE
    assert got[-1]["type"] == "error"
    assert got[-1]["error"]["code"] == "TEXT_ENCODED_TOOL_CALL"
    assert "response.completed" not in [e["type"] for e in got]
    assert case.calls == 1  # no retry: it could not have been spliced


async def test_more_processes_still_splice_a_response_that_is_not_stored(stack: Stack) -> None:
    stack.provider.add("unstored", (Turn(content=PROSE + HERMES, delay=0.01), REAL))
    got = await stream(stack.url("workers"), "unstored", store=False)
    assert got[-1]["type"] == "response.completed"
    assert [i["type"] for i in got[-1]["response"]["output"]] == ["message", "function_call"]
