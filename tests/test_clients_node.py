"""Real Node client libraries against spillguard on loopback, in front of a scripted provider.

openai-node, the Vercel AI SDK (`@ai-sdk/openai` chat and Responses models,
`@ai-sdk/openai-compatible`) and LangChain JS (`@langchain/openai`) are pinned in
tests/clients/package.json. One `node` process per client runs every case for that client and
prints what the library returned; each case is one test here. Cases are told apart upstream by
their `model` (tests/clients/provider.py).

Without Node or `npm ci --prefix tests/clients`, these tests skip; with
SPILLGUARD_REQUIRE_NODE=1 (as .ci/run sets it), that is a failure instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.clients.provider import Case, Stack
from tests.clients.scenarios import (
    CHAT,
    RESPONSES,
    SCENARIOS,
    VARIANTS,
    Api,
    Finish,
    Outcome,
    Run,
    assert_clean,
    assert_failed,
    runs,
)

CLIENTS = Path(__file__).parent / "clients"
SCRIPTS = {"openai-node": "openai.mjs", "ai-sdk": "aisdk.mjs", "langchain-js": "langchain.mjs"}
NODE_LIMIT = 300.0  # seconds for one client's whole batch

AI_SDK = Finish("stop", "tool-calls")
AI_SDK_STREAM = Finish("stop", "tool-calls", error="error")  # streamText never throws
# The AI SDK keeps an HTTP error's parsed body as `data`; an error event becomes an `error`
# part holding the event's error object.
AI_SDK_AT = ("data.error.code", "code")
APIS = (
    Api("openai-node", "chat.create", False, False, CHAT),
    Api("openai-node", "chat.create.stream", True, False, CHAT),
    Api("openai-node", "chat.stream", True, False, CHAT),
    Api("openai-node", "responses.create", False, True, RESPONSES),
    Api("openai-node", "responses.create.stream", True, True, RESPONSES),
    Api("openai-node", "responses.stream", True, True, RESPONSES),
    # The AI SDK has no timeout on the HTTP exchange itself (`timeout.chunkMs` restarts on each
    # parsed stream part, and a keep-alive comment is none), so the hold-timeout case skips it.
    Api("ai-sdk", "chat.generate", False, False, AI_SDK, False, AI_SDK_AT),
    Api("ai-sdk", "chat.stream", True, False, AI_SDK_STREAM, False, AI_SDK_AT),
    Api("ai-sdk", "responses.generate", False, True, AI_SDK, False, AI_SDK_AT),
    Api("ai-sdk", "responses.stream", True, True, AI_SDK_STREAM, False, AI_SDK_AT),
    Api("ai-sdk", "compat.generate", False, False, AI_SDK, False, AI_SDK_AT),
    Api("ai-sdk", "compat.stream", True, False, AI_SDK_STREAM, False, AI_SDK_AT),
    Api("langchain-js", "chat.invoke", False, False, CHAT),
    Api("langchain-js", "chat.stream", True, False, CHAT),
    Api("langchain-js", "responses.invoke", False, True, RESPONSES),
    Api("langchain-js", "responses.stream", True, True, RESPONSES),
)


def _runs() -> list[Run]:
    aisdk = [a for a in APIS if a.client == "ai-sdk"]
    out = runs((a for a in APIS if a.client != "ai-sdk"), chain="previous")
    # The AI SDK continues a conversation by resending it (item references, as `store` is on by
    # default); its `previousResponseId` option is the other way, run as a case of its own.
    out += runs(aisdk, chain="history")
    splice = SCENARIOS["chain_after_splice"]
    out += [
        Run(a, splice, name="chain_after_splice_previous_response_id", chain="previous")
        for a in aisdk
        if splice.applies(a)
    ]
    return out


RUNS = _runs()

# Whether the client itself retries spillguard's 502 (sent with `x-should-retry: false`) on top
# of spillguard's own retry: upstream calls seen with the client's retry setting. openai-node
# honours the header. The AI SDK ignores it, retries twice (its default) and then throws a
# RetryError that holds the last 502 as `lastError`. LangChain JS ignores it too; its default
# is six retries with exponential backoff (about a minute), so this case sets two.
RETRIES = {
    "openai-node": ("chat.create", None, 2, "code"),
    "ai-sdk": ("chat.generate", None, 6, "lastError.data.error.code"),
    "langchain-js": ("chat.invoke", 2, 6, "code"),
}
RETRY_RUNS = {
    client: Run(
        next(a for a in APIS if a.id == f"{client}:{call}"),
        SCENARIOS["double_leak"],
        retries=retries,
        name="client_retries_502",
    )
    for client, (call, retries, _, _) in RETRIES.items()
}


async def _node(node: str, script: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        node,
        str(CLIENTS / script),
        json.dumps({"cases": cases}),
        cwd=CLIENTS,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), NODE_LIMIT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{script} exited {proc.returncode}: {err.decode()[-4000:]}")
    results: list[dict[str, Any]] = json.loads(out)
    return results


async def _run_all(node: str) -> dict[str, tuple[Outcome, Case]]:
    stack = await Stack().start(**VARIANTS)
    try:
        batches: dict[str, list[dict[str, Any]]] = {client: [] for client in SCRIPTS}
        for run in [*RUNS, *RETRY_RUNS.values()]:
            stack.provider.add(run.model, run.scenario.turns)
            batches[run.api.client].append(run.spec(stack.url(run.variant)))
        outputs = await asyncio.gather(
            *(_node(node, SCRIPTS[client], cases) for client, cases in batches.items())
        )
    finally:
        await stack.stop()
    cases = stack.provider.cases
    return {r["model"]: (Outcome.from_json(r), cases[r["model"]]) for out in outputs for r in out}


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[Outcome, Case]]:
    node = shutil.which("node")
    missing = (
        "node is not installed"
        if node is None
        else "tests/clients/node_modules is missing (run: npm ci --prefix tests/clients)"
        if not (CLIENTS / "node_modules").is_dir()
        else None
    )
    if missing is not None:
        if os.environ.get("SPILLGUARD_REQUIRE_NODE") == "1":
            pytest.fail(f"SPILLGUARD_REQUIRE_NODE=1 but {missing}")
        pytest.skip(missing)
    assert node is not None
    return asyncio.run(_run_all(node))


@pytest.mark.parametrize("run", [run.param() for run in RUNS])
def test_client(results: dict[str, tuple[Outcome, Case]], run: Run) -> None:
    got, case = results[run.model]
    assert_clean(got)
    run.scenario.check(got, case, run.api)


@pytest.mark.parametrize("client", sorted(RETRIES))
def test_whether_the_client_retries_the_502(
    results: dict[str, tuple[Outcome, Case]], client: str
) -> None:
    run = RETRY_RUNS[client]
    got, case = results[run.model]
    assert_clean(got)
    _, _, calls, code_at = RETRIES[client]
    assert_failed(got, run.api, http=True, code_at=code_at)
    assert case.calls == calls
