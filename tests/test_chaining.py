"""Chaining after a spliced Responses stream (issue 12, item 3).

The request rewrite (`responses.chain_request`) is fed bytes; end to end, spillguard runs in
front of the stateful scripted provider (tests/clients/provider.py): with one process the splice
is remembered and a later request reaches the upstream naming what the client received; with
more processes (no map every replica can read) a stored response is never spliced: the leak
after published prose fails as an error event, unretried, while `store: false` still splices.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from spillguard import responses
from spillguard.chains import Chains
from spillguard.idmap import LocalIdMap, Spliced
from spillguard.jsonread import LEAVE_FROM, Unread, loads_leaving
from spillguard.responses import chain_request
from spillguard.responses_events import dumps
from spillguard.scripted import Raw, Turn, call
from spillguard.settings import Settings
from tests.clients.provider import JSON, Item, Provider, Refused, Stack
from tests.conftest import read_whole_unless

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
    items = {"msg_1": CLIENT_COPY, "rs_1": reasoning}
    ids.put(Spliced("resp_1", "resp_2", items, (reasoning, CLIENT_COPY), 1741476542))
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


def _long(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """`raw` made long enough to be read leaving `input` unread, as spillguard reads it."""
    raw = raw[:-1] + b', "instructions": "' + b"x" * LEAVE_FROM + b'"}'
    return raw, loads_leaving(raw, responses.WIRE.unread)


def test_a_long_request_s_item_references_become_the_items_too() -> None:
    raw, body = _long(
        b'{"previous_response_id":"resp_1","input":[{"type":"item_reference","id":"msg_1"},'
        b'{"role":"user","content":"And tomorrow?"}],"model":"m"}'
    )
    assert type(body["input"]) is Unread
    got = chain_request(raw, body, spliced_map())
    assert got is not None
    assert json.loads(got[0])["input"] == [
        {"role": "assistant", "content": PROSE},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert json.loads(got[0])["previous_response_id"] == "resp_2"
    assert got[1]["input"] == json.loads(got[0])["input"]


def test_a_long_request_written_out_again_reads_what_was_left_unread() -> None:
    raw, body = _long(b'{"previous_response_id":"resp_1","input":[{"id":"msg_1"}],"model":"m"}')
    got = chain_request(b"bytes where no member can be found", body, spliced_map())
    assert got is not None
    want = json.loads(raw) | {"previous_response_id": "resp_2"}
    assert json.loads(got[0]) == want | {"input": [{"role": "assistant", "content": PROSE}]}


def test_a_long_request_s_input_is_not_read_when_no_splice_holds_items() -> None:
    raw, body = _long(b'{"input":[{"type":"item_reference","id":"msg_1"}],"model":"m"}')
    empty = LocalIdMap(shared=True)
    assert not empty.holds_items()
    assert chain_request(raw, body, empty) is None
    assert type(body["input"]) is Unread  # left as it was
    assert spliced_map().holds_items()


# ---- a GET of a spliced response, on bytes --------------------------------------------------

FC = {"id": "fc_2", "type": "function_call", "call_id": "call_1", "name": "get_weather"}
FC |= {"arguments": "{}", "status": "completed"}


def chains() -> Chains:
    made = Chains(Settings(), responses.WIRE.chaining)
    made.ids.put(Spliced("resp_1", "resp_2", {"msg_1": CLIENT_COPY}, (CLIENT_COPY, FC), 1000))
    return made


@pytest.mark.parametrize(
    ("method", "rest", "query", "fetched"),
    [
        ("GET", "responses/resp_1", "", "responses/resp_2"),
        ("GET", "responses/resp_1", "include[]=reasoning.encrypted_content", "responses/resp_2"),
        ("GET", "responses/resp_1", "stream=false", "responses/resp_2"),
        ("GET", "responses/resp%5F1", "", "responses/resp_2"),
        ("GET", "responses/resp_1", "stream=true", None),  # a replay of its events
        ("GET", "responses/resp_1/input_items", "", None),  # the client's own input
        ("GET", "responses/resp_2", "", None),  # the retry's own id: the upstream's
        ("GET", "responses/resp_9", "", None),
        ("GET", "models/resp_1", "", None),
        ("DELETE", "responses/resp_1", "", None),
        ("POST", "responses/resp_1/cancel", "", None),
    ],
)
def test_only_a_get_of_a_spliced_response_is_looked_up(
    method: str, rest: str, query: str, fetched: str | None
) -> None:
    found = chains().lookup(method, rest, query)
    assert (found.rest if found is not None else None) == fetched


def test_a_wire_without_chaining_looks_nothing_up() -> None:
    plain = Chains(Settings(), None)
    assert plain.lookup("GET", "responses/resp_1", "") is None
    plain.passed("DELETE", "responses/resp_1", 200)  # nothing to forget, nothing raised


def test_the_retry_s_response_becomes_the_one_the_client_received() -> None:
    lookup = chains().lookup("GET", "responses/resp_1", "")
    assert lookup is not None
    upstream = (
        b'{"id": "resp_2", "object": "response", "created_at": 2000, "status": "completed",'
        b' "n": 1e400, "output": [{"id": "fc_2"}], "usage": {"total_tokens": 7}}'
    )
    got = lookup.reply(200, upstream)
    assert got == (
        b'{"id": "resp_1", "object": "response", "created_at": 1000, "status": "completed",'
        b' "n": 1e400, "output": '
        + dumps([CLIENT_COPY, FC]).encode()
        + b', "usage": {"total_tokens": 7}}'
    )
    with_text = json.dumps({"id": "resp_2", "output": [], "output_text": "<tool_call>"}).encode()
    assert json.loads(lookup.reply(200, with_text)) == {
        "id": "resp_1",
        "output": [CLIENT_COPY, FC],
        "output_text": PROSE,
    }


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, b'{"error": {"message": "Response with id \'resp_2\' not found."}}'),
        (200, b'{"id": "resp_3", "output": []}'),  # not the retry's response
        (200, b"not json"),
        (200, b"[1, 2]"),
    ],
)
def test_anything_but_the_retry_s_response_passes_as_it_came(status: int, body: bytes) -> None:
    lookup = chains().lookup("GET", "responses/resp_1", "")
    assert lookup is not None and lookup.reply(status, body) == body


def test_a_deleted_spliced_response_is_forgotten() -> None:
    made = chains()
    for method, status in (("DELETE", 404), ("GET", 200), ("POST", 200)):
        made.passed(method, "responses/resp_1", status)
        assert made.lookup("GET", "responses/resp_1", "") is not None
    made.passed("DELETE", "responses/resp_1", 200)
    assert made.lookup("GET", "responses/resp_1", "") is None
    assert made.ids.response("resp_1") is None


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


@pytest.mark.parametrize("long", [False, True])
async def test_one_process_remembers_the_splice_for_the_next_request(
    stack: Stack, long: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`long`: the next request is long enough to be read leaving its `input` unread."""
    read_whole_unless(long, monkeypatch)
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
    if long:
        follow["instructions"] = "Be brief. " * (LEAVE_FROM // 10)
    async with httpx.AsyncClient(base_url=stack.url("one"), timeout=30) as http:
        r = await http.post("/responses", json=follow)
    assert r.status_code == 200, r.text
    sent = case.requests[2]["body"]
    assert len(json.dumps(sent)) > LEAVE_FROM or not long
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


# ---- a GET of a spliced response, end to end -------------------------------------------------

BY_ID = re.compile(r"/v1/responses/([^/?]+)")


class Keeping(Provider):
    """The provider, also answering `GET` and `DELETE /v1/responses/{id}` for the responses it
    stored, as a real one does."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, dict[str, Any]] = {}

    def answer(self, record: dict[str, Any]) -> Turn | Raw:
        found = BY_ID.fullmatch(record["path"].split("?", 1)[0])
        if found is None or record["method"] not in ("GET", "DELETE"):
            return super().answer(record)
        response_id = found.group(1)
        kept = self.kept.get(response_id)
        if kept is None:
            return Refused(404, f"Response with id '{response_id}' not found.", None).reply
        if record["method"] == "DELETE":
            del self.kept[response_id]
            gone = {"id": response_id, "object": "response", "deleted": True}
            return Raw(200, JSON, [json.dumps(gone).encode()])
        return Raw(200, JSON, [json.dumps(kept).encode()])

    def _respond(self, body: dict[str, Any], turn: Turn, context: list[Item]) -> Raw:
        raw = super()._respond(body, turn, context)
        if body.get("store", True) is not False:
            last = raw.chunks[-1].decode()
            response = json.loads(last.split("data: ", 1)[1]) if body.get("stream") else None
            response = response["response"] if response is not None else json.loads(last)
            self.kept[response["id"]] = response
        return raw


@pytest_asyncio.fixture
async def keeping() -> AsyncIterator[Stack]:
    running = Stack()
    running.provider = Keeping()
    await running.start(one={})
    yield running
    await running.stop()


def fetched(stack: Stack) -> list[str]:
    """The paths spillguard asked the upstream for with GET."""
    return [r["path"] for r in stack.provider.upstream.requests if r["method"] == "GET"]


async def test_a_get_of_a_spliced_response_returns_what_the_client_received(
    keeping: Stack,
) -> None:
    keeping.provider.add("spliced", (Turn(content=PROSE + HERMES, delay=0.01), REAL))
    got = await stream(keeping.url("one"), "spliced")
    completed = got[-1]["response"]
    assert got[-1]["type"] == "response.completed"
    leaked = keeping.provider.kept[completed["id"]]
    # The upstream keeps the leak under the client's id.
    assert leaked["output"][0]["content"][0]["text"] == PROSE + HERMES
    async with httpx.AsyncClient(base_url=keeping.url("one"), timeout=30) as http:
        r = await http.get(f"/responses/{completed['id']}", params={"include[]": "x"})
    assert r.status_code == 200 and r.json() == completed
    retry = next(i for i in keeping.provider.kept if i != completed["id"])
    assert fetched(keeping) == [f"/v1/responses/{retry}?include%5B%5D=x"]
    client = openai.AsyncOpenAI(base_url=keeping.url("one"), api_key="sk-test", max_retries=0)
    response = await client.responses.retrieve(completed["id"])
    assert response.id == completed["id"] and response.output_text == PROSE
    assert [i.type for i in response.output] == ["message", "function_call"]


async def test_a_get_of_a_response_that_was_not_spliced_passes_untouched(keeping: Stack) -> None:
    keeping.provider.add("honest", (Turn(content="Sunny in Lisbon."),))
    got = await stream(keeping.url("one"), "honest")
    response_id = got[-1]["response"]["id"]
    async with httpx.AsyncClient(base_url=keeping.url("one"), timeout=30) as http:
        r = await http.get(f"/responses/{response_id}")
    assert r.content == json.dumps(keeping.provider.kept[response_id]).encode()
    assert fetched(keeping) == [f"/v1/responses/{response_id}"]


async def test_a_deleted_spliced_response_is_gone(keeping: Stack) -> None:
    keeping.provider.add("deleted", (Turn(content=PROSE + HERMES, delay=0.01), REAL))
    got = await stream(keeping.url("one"), "deleted")
    response_id = got[-1]["response"]["id"]
    async with httpx.AsyncClient(base_url=keeping.url("one"), timeout=30) as http:
        assert (await http.delete(f"/responses/{response_id}")).status_code == 200
        r = await http.get(f"/responses/{response_id}")
    assert r.status_code == 404  # the upstream has it no more; the retry's is not shown instead
