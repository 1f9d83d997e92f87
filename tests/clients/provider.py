"""A provider for the client suites: many cases on one scripted upstream, each named by `model`.

Every request's `model` names a case, and the case's turns are played in order (the last one
repeats). On `/v1/responses` the provider keeps state the way a real one does: each response and
each output item gets its own id, a stored response can be continued with
`previous_response_id`, an `item_reference` is resolved to the stored item, and a
`function_call_output` whose `call_id` the conversation does not hold is refused with a `400`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from spillguard.runner import Running, start_background
from spillguard.scripted import Raw, ScriptedUpstream, Turn, response_events, response_object
from spillguard.settings import Settings

JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream"}
Item = dict[str, Any]


@dataclass(frozen=True)
class Seen:
    """What a Responses request named, as the provider resolved it."""

    inputs: list[Item]  # its `input`, each `item_reference` replaced by the stored item
    previous: list[Item] | None  # the output of the response `previous_response_id` names


@dataclass
class Case:
    """One case's script and what the upstream saw of it."""

    turns: tuple[Turn, ...]
    requests: list[dict[str, Any]] = field(default_factory=list)
    seen: list[Seen | None] = field(default_factory=list)  # None: a refused or a chat request

    @property
    def calls(self) -> int:
        return len(self.requests)


class Refused(Exception):
    def __init__(self, status: int, message: str, param: str | None) -> None:
        error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
        self.reply = Raw(status, JSON, [json.dumps({"error": error}).encode()])


class Provider:
    def __init__(self) -> None:
        self.cases: dict[str, Case] = {}
        self.upstream = ScriptedUpstream(self.answer)
        self._conversations: dict[str, list[Item]] = {}  # response id -> items through its output
        self._outputs: dict[str, list[Item]] = {}
        self._items: dict[str, Item] = {}
        self._ids = itertools.count(1)

    def add(self, model: str, turns: tuple[Turn, ...]) -> Case:
        assert model not in self.cases, model
        self.cases[model] = Case(turns)
        return self.cases[model]

    def answer(self, record: dict[str, Any]) -> Turn | Raw:
        body = record["body"] if isinstance(record["body"], dict) else {}
        case = self.cases.get(str(body.get("model")))
        if case is None:
            return Refused(404, f"The model `{body.get('model')}` does not exist", "model").reply
        case.requests.append(record)
        turn = case.turns[min(case.calls, len(case.turns)) - 1]
        if not record["path"].startswith("/v1/responses"):
            case.seen.append(None)
            return turn
        try:
            context, seen = self._context(body)
        except Refused as refused:
            case.seen.append(None)
            return refused.reply
        case.seen.append(seen)
        return self._respond(body, turn, context)

    def _context(self, body: dict[str, Any]) -> tuple[list[Item], Seen]:
        """The whole conversation this request continues, and what it named."""
        context: list[Item] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            if previous not in self._conversations:
                message = f"Previous response with id '{previous}' not found."
                raise Refused(400, message, "previous_response_id")
            context = list(self._conversations[previous])
        given = body.get("input", [])
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        inputs = []
        for item in items:
            if item.get("type") == "item_reference":
                found = self._items.get(item.get("id", ""))
                if found is None:
                    raise Refused(404, f"Item with id '{item.get('id')}' not found.", "input")
                item = found
            inputs.append(item)
        context += inputs
        calls = {i.get("call_id") for i in context if i.get("type") == "function_call"}
        for item in context:
            cid = item.get("call_id")
            if item.get("type") == "function_call_output" and cid not in calls:
                message = f"No tool call found for function call output with call_id {cid}."
                raise Refused(400, message, "input")
        return context, Seen(inputs, None if previous is None else self._outputs[previous])

    def _respond(self, body: dict[str, Any], turn: Turn, context: list[Item]) -> Raw:
        """The turn as a response of its own: fresh response and item ids, stored unless
        `store` is false."""
        n = next(self._ids)
        ids = {"resp_scripted": f"resp_{n}", "msg_1": f"msg_{n}", "rs_1": f"rs_{n}"}
        ids |= {f"fc_{tc['id']}": f"fc_{n}_{tc['id']}" for tc in turn.tool_calls}

        def renamed(text: str) -> str:
            for old, new in ids.items():
                text = text.replace(f'"{old}"', f'"{new}"')
            return text

        model = str(body.get("model"))
        response = json.loads(renamed(json.dumps(response_object(turn, model))))
        if body.get("store", True) is not False:
            self._conversations[response["id"]] = context + response["output"]
            self._outputs[response["id"]] = response["output"]
            self._items |= {item["id"]: item for item in response["output"]}
        if body.get("stream"):
            events = [renamed(e.decode()).encode() for e in response_events(turn, model)]
            return Raw(200, SSE, events, turn.delay)
        return Raw(200, JSON, [json.dumps(response).encode()])


class Stack:
    """The provider with spillguard in front of it, one spillguard per named settings variant."""

    def __init__(self) -> None:
        self.provider = Provider()
        self.proxies: dict[str, Running] = {}

    async def start(self, **variants: dict[str, Any]) -> Stack:
        await self.provider.upstream.start()
        for name, settings in variants.items():
            base: dict[str, Any] = {"upstream": self.provider.upstream.url, "port": 0}
            base |= {"log_level": "WARNING", "incidents_db": ""}
            self.proxies[name] = await start_background(Settings(**(base | settings)))
        return self

    def url(self, variant: str) -> str:
        return self.proxies[variant].url

    async def stop(self) -> None:
        for proxy in self.proxies.values():
            await proxy.stop()
        await self.provider.upstream.stop()
