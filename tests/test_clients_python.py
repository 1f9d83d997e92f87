"""Real Python client libraries against spillguard on loopback, in front of a scripted provider.

openai-python (chat and Responses: whole, streamed, and the `stream()` helpers) and LangChain
(`langchain-openai` ChatOpenAI: invoke and stream, chat and Responses) run the same scenarios
as the Node clients (tests/clients/scenarios.py). LangChain is not a declared dependency: .ci/run
installs it, and without it its tests skip.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import openai
import pytest
import pytest_asyncio

from tests.clients.provider import Stack
from tests.clients.scenarios import (
    CHAT,
    CLIENT_TIMEOUT,
    PROMPT,
    RESPONSES,
    SCENARIOS,
    TOOL,
    TOOL_OUTPUT,
    VARIANTS,
    Api,
    Failure,
    Outcome,
    Run,
    ToolCall,
    assert_clean,
    assert_failed,
    runs,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHAT_TOOLS: list[Any] = [{"type": "function", "function": TOOL}]
RESPONSES_TOOLS: list[Any] = [{"type": "function", **TOOL}]
MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]

APIS = (
    Api("openai-python", "chat.create", False, False, CHAT),
    Api("openai-python", "chat.create.stream", True, False, CHAT),
    Api("openai-python", "chat.stream", True, False, CHAT),
    Api("openai-python", "responses.create", False, True, RESPONSES),
    Api("openai-python", "responses.create.stream", True, True, RESPONSES),
    Api("openai-python", "responses.stream", True, True, RESPONSES),
    Api("langchain-python", "chat.invoke", False, False, CHAT),
    Api("langchain-python", "chat.stream", True, False, CHAT),
    Api("langchain-python", "responses.invoke", False, True, RESPONSES),
    Api("langchain-python", "responses.stream", True, True, RESPONSES),
)
RUNS = runs(APIS)

# Whether the client itself retries spillguard's 502 (`x-should-retry: false`) with its default
# retries: openai-python honours the header, and so does LangChain, which leaves retrying to
# the openai client it wraps.
RETRIES = {"openai-python": ("chat.create", 2), "langchain-python": ("chat.invoke", 2)}


def failure(e: Exception) -> Failure:
    code = getattr(e, "code", None)
    status = getattr(e, "status_code", None)
    return Failure(
        kind=type(e).__name__,
        status=status if isinstance(status, int) else None,
        code=code if isinstance(code, str) else None,
        where="code" if isinstance(code, str) else None,
        message=str(e),
    )


class Recorder:
    """Collects an Outcome while a client runs; a raised error is kept as the failure."""

    def __init__(self) -> None:
        self.text = ""
        self.fields: dict[str, Any] = {}

    def done(self, error: Exception | None = None) -> Outcome:
        fields = {"text": self.text, **self.fields}
        return Outcome(**fields, error=None if error is None else failure(error))


# openai-python


def _openai(run: Run, base: str) -> openai.AsyncOpenAI:
    kw: dict[str, Any] = {"base_url": base, "api_key": "sk-test"}
    if run.retries is not None:
        kw["max_retries"] = run.retries
    if run.scenario.timeout:
        kw["timeout"] = CLIENT_TIMEOUT
    return openai.AsyncOpenAI(**kw)


def _completion(r: Recorder, completion: Any) -> None:
    choice = completion.choices[0]
    r.text = choice.message.content or ""
    r.fields = {
        "calls": tuple(
            ToolCall(tc.function.name, tc.function.arguments, tc.id)
            for tc in choice.message.tool_calls or ()
        ),
        "finish": choice.finish_reason,
        "response_id": completion.id,
    }


def _response(r: Recorder, response: Any) -> None:
    r.fields = {
        "calls": tuple(
            ToolCall(i.name, i.arguments, i.call_id)
            for i in response.output
            if i.type == "function_call"
        ),
        "finish": response.status,
        "response_id": response.id,
        "messages": tuple(
            "".join(getattr(p, "text", "") for p in i.content)
            for i in response.output
            if i.type == "message"
        ),
    }


async def _chat_chunks(r: Recorder, stream: Any) -> None:
    """A plain stream, assembled the way clients do: string fields of a call concatenate."""
    calls: dict[int, list[str]] = {}
    async for chunk in stream:
        r.fields["response_id"] = chunk.id
        for choice in chunk.choices:
            r.text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                call = calls.setdefault(tc.index, ["", "", ""])
                call[0] += tc.id or ""
                call[1] += (tc.function and tc.function.name) or ""
                call[2] += (tc.function and tc.function.arguments) or ""
            if choice.finish_reason:
                r.fields["finish"] = choice.finish_reason
    r.fields["calls"] = tuple(ToolCall(n, a, i) for i, n, a in calls.values())


async def _openai_once(run: Run, base: str, r: Recorder) -> None:
    client = _openai(run, base)
    chat: dict[str, Any] = {"model": run.model, "messages": MESSAGES, "tools": CHAT_TOOLS}
    responses: dict[str, Any] = {"model": run.model, "input": PROMPT, "tools": RESPONSES_TOOLS}
    call = run.api.call
    if call == "chat.create":
        _completion(r, await client.chat.completions.create(**chat))
    elif call == "chat.create.stream":
        await _chat_chunks(r, await client.chat.completions.create(**chat, stream=True))
    elif call == "chat.stream":
        async with client.chat.completions.stream(**chat) as stream:
            async for part in stream:
                if part.type == "content.delta":
                    r.text += part.delta
            _completion(r, await stream.get_final_completion())
    elif call == "responses.create":
        response = await client.responses.create(**responses)
        _response(r, response)
        r.text = response.output_text
    elif call == "responses.create.stream":
        completed = None
        async for event in await client.responses.create(**responses, stream=True):
            if event.type == "response.output_text.delta":
                r.text += event.delta
            elif event.type == "response.completed":
                completed = event.response
        if completed is not None:
            _response(r, completed)
    else:
        assert call == "responses.stream", call
        async with client.responses.stream(**responses) as events:
            async for event in events:
                if event.type == "response.output_text.delta":
                    r.text += event.delta
            final = await events.get_final_response()
        _response(r, final)
        r.text = final.output_text


async def _openai_chain(run: Run, base: str, first: Outcome) -> Outcome:
    """The next turn after the tool call, chained by hand with previous_response_id."""
    r = Recorder()
    try:
        response = await _openai(run, base).responses.create(
            model=run.model,
            previous_response_id=first.response_id,
            input=[
                {
                    "type": "function_call_output",
                    "call_id": first.calls[0].id,
                    "output": TOOL_OUTPUT,
                }
            ],
            tools=RESPONSES_TOOLS,
        )
        _response(r, response)
        r.text = response.output_text
    except openai.APIError as e:
        return r.done(e)
    return r.done()


# LangChain (langchain-openai)


def _langchain(run: Run, base: str, retries: int | None = None) -> Any:
    langchain_openai = pytest.importorskip("langchain_openai")
    kw: dict[str, Any] = {
        "model": run.model,
        "base_url": base,
        "api_key": "sk-test",
        "use_responses_api": run.api.responses,
    }
    retries = run.retries if retries is None else retries
    if retries is not None:
        kw["max_retries"] = retries
    if run.scenario.timeout:
        kw["timeout"] = CLIENT_TIMEOUT
    return langchain_openai.ChatOpenAI(**kw).bind_tools(CHAT_TOOLS)


def _message(r: Recorder, msg: Any, responses: bool) -> None:
    meta = msg.response_metadata or {}
    r.fields = {
        "calls": tuple(
            ToolCall(tc["name"], json.dumps(tc["args"]), tc["id"]) for tc in msg.tool_calls
        ),
        "rejected": tuple(f"{tc['name']}: {tc.get('error')}" for tc in msg.invalid_tool_calls),
        "finish": meta.get("finish_reason") or meta.get("status"),
        "response_id": meta.get("id") or msg.id,
    }
    if responses and isinstance(msg.content, list):
        r.fields["messages"] = tuple(
            b["text"] for b in msg.content if isinstance(b, dict) and b.get("type") == "text"
        )


async def _langchain_once(run: Run, base: str, r: Recorder) -> None:
    model = _langchain(run, base)
    if run.api.call.endswith(".invoke"):
        msg = await model.ainvoke(PROMPT)
        _message(r, msg, run.api.responses)
        r.text = msg.text
        return
    whole = None
    async for chunk in model.astream(PROMPT):
        r.text += chunk.text
        whole = chunk if whole is None else whole + chunk
    if whole is not None:
        _message(r, whole, run.api.responses)


async def _langchain_chain(run: Run, base: str, first: Outcome) -> Outcome:
    """The next turn after the tool call, chained with previous_response_id."""
    from langchain_core.messages import ToolMessage

    r = Recorder()
    try:
        msg = await _langchain(run, base, retries=0).ainvoke(
            [ToolMessage(content=TOOL_OUTPUT, tool_call_id=first.calls[0].id)],
            previous_response_id=first.response_id,
        )
        _message(r, msg, run.api.responses)
        r.text = msg.text
    except openai.APIError as e:
        return r.done(e)
    return r.done()


Once = Callable[[Run, str, Recorder], Awaitable[None]]
Chain = Callable[[Run, str, Outcome], Awaitable[Outcome]]
DRIVERS: dict[str, tuple[Once, Chain]] = {
    "openai-python": (_openai_once, _openai_chain),
    "langchain-python": (_langchain_once, _langchain_chain),
}


async def drive(run: Run, base: str) -> Outcome:
    once, chain = DRIVERS[run.api.client]
    r = Recorder()
    try:
        await once(run, base, r)
    except openai.APIError as e:
        return r.done(e)
    got = r.done()
    if run.chain and got.calls:
        return replace(got, chained=await chain(run, base, got))
    return got


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[Stack]:
    """One provider and spillguard for the module: each case has its own `model`."""
    running = await Stack().start(**VARIANTS)
    yield running
    await running.stop()


@pytest.mark.parametrize("run", [run.param() for run in RUNS])
async def test_client(stack: Stack, run: Run) -> None:
    if run.api.client == "langchain-python":
        pytest.importorskip("langchain_openai")
    case = stack.provider.add(run.model, run.scenario.turns)
    got = await drive(run, stack.url(run.variant))
    assert_clean(got)
    run.scenario.check(got, case, run.api)


@pytest.mark.parametrize("client", sorted(RETRIES))
async def test_whether_the_client_retries_the_502(stack: Stack, client: str) -> None:
    if client == "langchain-python":
        pytest.importorskip("langchain_openai")
    call, expected = RETRIES[client]
    api = next(a for a in APIS if a.id == f"{client}:{call}")
    run = Run(api, SCENARIOS["double_leak"], retries=None, name="client_retries_502")
    case = stack.provider.add(run.model, run.scenario.turns)
    got = await drive(run, stack.url("default"))
    assert_clean(got)
    assert_failed(got, api, http=True)
    assert case.calls == expected
