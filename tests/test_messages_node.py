"""@anthropic-ai/sdk for Node against spillguard's Messages route, in front of the scripted
Anthropic-compatible upstream: one `node` process runs every case (each named upstream by its
`model`), and each case is one test here.

The SDK is pinned in tests/clients_anthropic/package-lock.json. Without Node or
`npm ci --prefix tests/clients_anthropic`, these tests skip; with SPILLGUARD_REQUIRE_NODE=1 (as
.ci/run sets it), that is a failure instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spillguard.scripted import Raw
from spillguard.scripted_anthropic import Message, error, text, thinking, tool_use
from tests.anthropic_stack import CALL, DSML, FAMILIES, HONEST, KIMI, MINIMAX, AnthropicStack

CLIENT = Path(__file__).parent / "clients_anthropic"
NODE_LIMIT = 300.0  # seconds for the whole batch
PROSE = "Let me check that.\n"
SLOW = 0.01  # between stream events, so prose is out before its markup arrives
WEATHER = [{"type": "tool_use", "text": "get_weather", "input": {"city": "Lisbon"}}]
SUNNY = [{"type": "text", "text": HONEST.content[0].text}]


@dataclass(frozen=True)
class Case:
    call: str
    turns: tuple[Message | Raw, ...]
    blocks: list[dict[str, Any]] | None = None  # what the SDK assembles, when it succeeds
    code: str | None = None  # the error code it raises with, when it fails
    calls: int | None = None  # message requests upstream
    extra: dict[str, Any] | None = None  # more fields the result must have
    retries: int = 0  # the SDK's own


def _leak(body: str) -> Message:
    return Message([text(PROSE + body)], delay=SLOW)


THOUGHT = thinking("A weather lookup.", "sig-node-1")
CASES: dict[str, Case] = {
    "honest-create": Case("create", (HONEST,), SUNNY, calls=1),
    "honest-stream": Case("stream", (HONEST,), SUNNY, calls=1),
    **{
        f"{family}-create": Case("create", (Message([text(leak)]), CALL), WEATHER, calls=2)
        for family, leak in FAMILIES.items()
    },
    **{
        f"{family}-stream": Case(
            "stream",
            (_leak(leak), CALL),
            [{"type": "text", "text": PROSE}, *WEATHER],
            calls=2,
            extra={"text": PROSE, "stop": "tool_use"},
        )
        for family, leak in FAMILIES.items()
        if family != "claude_xml"  # its stray `count` line is prose: below
    },
    "claude-stream": Case(
        "stream",
        (_leak(FAMILIES["claude_xml"]), CALL),
        [{"type": "text", "text": PROSE + "count\n"}, *WEATHER],
        calls=2,
    ),
    # With the SDK's two retries on: `x-should-retry: false` keeps it from repeating the 502.
    "double-create": Case(
        "create",
        (Message([text(DSML)]), Message([text(KIMI)])),
        code="TEXT_ENCODED_TOOL_CALL",
        calls=2,
        retries=2,
    ),
    "double-stream": Case(
        "stream",
        (_leak(DSML), _leak(MINIMAX)),
        code="TEXT_ENCODED_TOOL_CALL",
        calls=2,
        extra={"text": PROSE + PROSE},
        retries=2,
    ),
    "thinking-create": Case(
        "create",
        (Message([THOUGHT, *CALL.content]),),
        [{"type": "thinking", "text": "A weather lookup.", "signature": "sig-node-1"}, *WEATHER],
        calls=1,
    ),
    "thinking-stream": Case(
        "stream",
        (Message([THOUGHT, *CALL.content]),),
        [{"type": "thinking", "text": "A weather lookup.", "signature": "sig-node-1"}, *WEATHER],
        calls=1,
    ),
    # The thinking before the markup had gone out: the retry follows it in the same message.
    "thinking-leak-stream": Case(
        "stream",
        (Message([thinking("Calling.\n" + KIMI), text("Done.")], delay=SLOW), CALL),
        [{"type": "thinking", "text": "Calling.\n", "signature": ""}, *WEATHER],
        calls=2,
    ),
    "real-call-stream": Case(
        "stream",
        (Message([text("Checking."), tool_use("Read", {"file_path": "/a"})]),),
        [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "text": "Read", "input": {"file_path": "/a"}},
        ],
        calls=1,
    ),
    "rate-limited": Case(
        "create",
        (error(429, "rate_limit_error", "Slow down"),),
        calls=1,
        extra={
            "error": {
                "status": 429,
                "type": "rate_limit_error",
                "requestID": "req_err",
                "kind": "RateLimitError",
            }
        },
    ),
    "overloaded": Case(
        "stream",
        (error(529, "overloaded_error", "Overloaded"),),
        calls=1,
        extra={"error": {"status": 529, "type": "overloaded_error", "requestID": "req_err"}},
    ),
    "count": Case("count", (HONEST,), calls=0),
    "models": Case("models", (HONEST,), calls=0, extra={"models": ["deepseek-chat"]}),
}


async def _run(node: str) -> tuple[dict[str, dict[str, Any]], AnthropicStack]:
    stack = AnthropicStack()
    stack.cases = {model: list(case.turns) for model, case in CASES.items()}
    await stack.start()
    try:
        cases = [{"model": m, "call": c.call, "retries": c.retries} for m, c in CASES.items()]
        spec = json.dumps({"base": stack.base_url, "cases": cases})
        proc = await asyncio.create_subprocess_exec(
            node,
            str(CLIENT / "messages.mjs"),
            spec,
            cwd=CLIENT,
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
            raise RuntimeError(f"messages.mjs exited {proc.returncode}: {err.decode()[-4000:]}")
    finally:
        await stack.stop()
    return {r["model"]: r for r in json.loads(out)}, stack


@pytest.fixture(scope="module")
def results() -> tuple[dict[str, dict[str, Any]], AnthropicStack]:
    node = shutil.which("node")
    missing = (
        "node is not installed"
        if node is None
        else "tests/clients_anthropic/node_modules is missing "
        "(run: npm ci --prefix tests/clients_anthropic)"
        if not (CLIENT / "node_modules").is_dir()
        else None
    )
    if missing is not None:
        if os.environ.get("SPILLGUARD_REQUIRE_NODE") == "1":
            pytest.fail(f"SPILLGUARD_REQUIRE_NODE=1 but {missing}")
        pytest.skip(missing)
    assert node is not None
    return asyncio.run(_run(node))


@pytest.mark.parametrize("model", list(CASES))
def test_node_sdk(results: tuple[dict[str, dict[str, Any]], AnthropicStack], model: str) -> None:
    got, stack = results[0][model], results[1]
    case = CASES[model]
    if case.code is None and (case.extra or {}).get("error") is None:
        assert got["error"] is None, got["error"]
    if case.blocks is not None:
        assert got["blocks"] == case.blocks
    if case.code is not None:
        assert got["error"]["errorCode"] == case.code
        assert got["error"]["type"] == "api_error"
    for key, want in (case.extra or {}).items():
        if isinstance(want, dict):
            assert {k: got[key][k] for k in want} == want
        else:
            assert got[key] == want
    if case.calls is not None:
        assert len(stack.requests_for(model)) == case.calls
    if model in ("count", "models"):
        assert got["error"] is None
        paths = [r["path"].split("?")[0] for r in stack.upstream.requests]
        assert "/v1/messages/count_tokens" in paths and "/v1/models" in paths
