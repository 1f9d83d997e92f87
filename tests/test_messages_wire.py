"""The Messages wire without a network: the whole-reply check, the retry request spliced into the
client's bytes, the error shape, and which requests speak Anthropic."""

from __future__ import annotations

import json

import pytest

from spillguard import messages
from spillguard.context import speaks_anthropic
from spillguard.detect import declared_tools
from spillguard.errors import ClientError, LeakedToolCall, UpstreamTimeout
from spillguard.settings import Settings
from tests.anthropic_stack import DSML, KIMI, MINIMAX, TOOLS
from tests.fuzz.wire_bytes import HOLD

DECLARED = declared_tools({"tools": [*TOOLS, {"type": "web_search_20250305", "name": "web"}]})


def reply(*blocks: dict[str, object], stop: str = "end_turn") -> dict[str, object]:
    return {"type": "message", "role": "assistant", "content": list(blocks), "stop_reason": stop}


def text(value: str) -> dict[str, object]:
    return {"type": "text", "text": value}


def thinking(value: str) -> dict[str, object]:
    return {"type": "thinking", "thinking": value, "signature": "sig"}


CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lisbon"}}


def test_the_declared_tools_bind_names_and_server_tools_turn_inspection_on() -> None:
    assert DECLARED.names == {"get_weather", "Read"}
    assert declared_tools({"tools": [{"type": "web_search_20250305", "name": "web"}]}).declared


def test_a_text_block_leak_keeps_only_the_prose_before_it() -> None:
    found = messages.inspect_reply(
        reply(text("Sure."), text("One moment.\n" + MINIMAX)), DECLARED, HOLD
    )
    assert found is not None
    finding, prose = found
    assert (finding.family, finding.tool_name) == ("minimax", "get_weather")
    assert finding.field == "content"
    assert prose == "Sure.One moment.\n"


def test_thinking_counts_only_without_a_call_block() -> None:
    leaked = reply(thinking("Let me call.\n" + KIMI), text("Done."))
    found = messages.inspect_reply(leaked, DECLARED, HOLD)
    assert found is not None and found[0].field == "reasoning" and found[1] == "Done."
    assert messages.inspect_reply(reply(thinking(KIMI), CALL), DECLARED, HOLD) is None
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web", "input": {}}
    assert messages.inspect_reply(reply(thinking(KIMI), server), DECLARED, HOLD) is None


def test_honest_replies_and_odd_shapes_have_no_finding() -> None:
    for body in (reply(text("Use `<tool_call>` tags.")), {"content": "x"}, [], None, reply()):
        assert messages.inspect_reply(body, DECLARED, HOLD) is None


def test_anomalies_of_a_whole_message() -> None:
    undeclared = {**CALL, "name": "delete_everything"}
    kinds = [a.kind for a in messages.reply_anomalies(reply(undeclared), DECLARED)]
    assert kinds == ["undeclared_tool"]
    missing = messages.reply_anomalies(reply(text("Done."), stop="tool_use"), DECLARED)
    assert [a.kind for a in missing] == ["tool_calls_without_calls"]
    assert messages.reply_anomalies(reply(CALL, stop="tool_use"), DECLARED) == []


RAW = (
    b'{"model":"deepseek-chat","max_tokens":1e3,"system":"Be \\u00e9brief.",'
    b'"messages":[{"role":"user","content":"Weather?"}],"thinking":{"type":"enabled"},'
    b'"metadata":{"user_id":"u"},"x_unknown":[1.50]}'
)


def test_the_retry_appends_the_prose_and_the_correction_to_the_clients_bytes() -> None:
    out = messages.WIRE.retry_request(RAW, json.loads(RAW), "One moment.\n", "Call the tool.")
    assert out.startswith(RAW[: RAW.index(b"]")])
    assert out.endswith(RAW[RAW.index(b"]") :])  # every other field byte for byte
    added = json.loads(out)["messages"][1:]
    assert added == [
        {"role": "assistant", "content": "One moment.\n"},
        {"role": "user", "content": "Call the tool."},
    ]


@pytest.mark.parametrize("prose", ["", " \n\t"])
def test_the_retry_sends_no_blank_assistant_turn(prose: str) -> None:
    out = messages.WIRE.retry_request(RAW, json.loads(RAW), prose, "Answer in prose.")
    assert json.loads(out)["messages"][1:] == [{"role": "user", "content": "Answer in prose."}]


def test_a_retry_without_a_messages_array_is_impossible() -> None:
    raw = b'{"model":"m","messages":"hi"}'
    with pytest.raises(TypeError):
        messages.WIRE.retry_request(raw, json.loads(raw), "x", "y")


def test_the_error_shape_carries_the_code_where_the_sdks_read_it() -> None:
    leak = LeakedToolCall({"tool_name": "Read", "family": "dsml", "request_id": "sg-1"})
    body = json.loads(messages.error_body(leak))
    assert body == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": "TEXT_ENCODED_TOOL_CALL: " + leak.message,
            "details": {
                "error_code": "TEXT_ENCODED_TOOL_CALL",
                "meta": {"tool_name": "Read", "family": "dsml", "request_id": "sg-1"},
            },
        },
        "request_id": "sg-1",
    }
    timeout = json.loads(messages.error_body(UpstreamTimeout("slow")))
    assert timeout["error"]["type"] == "timeout_error"
    refused = json.loads(messages.error_body(ClientError(401, "INVALID_PROXY_KEY", "no")))
    assert refused["error"]["type"] == "authentication_error"


def test_a_mid_stream_failure_is_an_error_event() -> None:
    event = messages.error_event(LeakedToolCall({"attempts": 2}), None)
    name, data = event.decode().split("\n")[:2]
    assert name == "event: error" and event.endswith(b"\n\n")
    assert json.loads(data.removeprefix("data: "))["error"]["details"]["meta"] == {"attempts": 2}


@pytest.mark.parametrize(
    ("path", "headers", "anthropic"),
    [
        ("/v1/messages", [], True),
        ("/v1/messages/count_tokens", [], True),
        ("/v1/models", [(b"anthropic-version", b"2023-06-01")], True),
        ("/v1/models", [(b"authorization", b"Bearer x")], False),
        ("/v1/messagesx", [], False),
        ("/v1/chat/completions", [], False),
    ],
)
def test_which_requests_speak_anthropic(
    path: str, headers: list[tuple[bytes, bytes]], anthropic: bool
) -> None:
    assert speaks_anthropic({"path": path, "headers": headers}) is anthropic


def test_the_anthropic_upstream_shortcuts() -> None:
    assert Settings(anthropic_upstream="deepseek").anthropic_upstream == (
        "https://api.deepseek.com/anthropic"
    )
    assert Settings(anthropic_upstream="MiniMax").anthropic_upstream == (
        "https://api.minimax.io/anthropic"
    )
    assert Settings(anthropic_upstream="http://127.0.0.1:9/x/").anthropic_upstream == (
        "http://127.0.0.1:9/x"
    )
    assert Settings().anthropic_upstream is None
    with pytest.raises(ValueError, match="anthropic_upstream"):
        Settings(anthropic_upstream="ftp://example")


def test_the_dsml_sample_is_found_in_a_whole_reply() -> None:
    found = messages.inspect_reply(reply(text(DSML)), DECLARED, HOLD)
    assert found is not None and found[0].family == "dsml" and found[1] == ""
