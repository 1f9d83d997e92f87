"""declared_tools: which tool names (and parameter names) a request declared, read defensively,
and when a request must not be inspected at all (no tools, or a json_schema response format)."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillguard import chat
from spillguard.detect import NO_TOOLS, KnownTools, ToolSet, declared_tools
from spillguard.jsonread import LEAVE_FROM, loads_leaving

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}


def test_chat_completions_tools() -> None:
    body = {
        "messages": [],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA},
            },
            {"type": "function", "function": {"name": "ping"}},
        ],
    }
    tools = declared_tools(body)
    assert tools.declared is True
    assert tools.names == {"get_weather", "ping"}
    assert tools.params == {"get_weather": {"city", "unit"}, "ping": frozenset()}
    assert tools.all_params == {"city", "unit"}


def test_legacy_functions() -> None:
    body = {
        "functions": [
            {"name": "lookup_order", "parameters": {"properties": {"order_id": {}}}},
            {"name": "cancel_order", "parameters": {"properties": {"order_id": {}, "why": {}}}},
        ]
    }
    tools = declared_tools(body)
    assert tools.declared is True
    assert tools.names == {"lookup_order", "cancel_order"}
    assert tools.params["cancel_order"] == {"order_id", "why"}


def test_responses_api_flat_tools() -> None:
    body = {
        "input": "hi",
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}],
    }
    tools = declared_tools(body)
    assert tools.names == {"get_weather"}
    assert tools.params == {"get_weather": {"city", "unit"}}


def test_tools_and_functions_together_are_merged() -> None:
    body = {
        "tools": [{"type": "function", "function": {"name": "a_tool"}}],
        "functions": [{"name": "b_fn"}],
    }
    assert declared_tools(body).names == {"a_tool", "b_fn"}


@pytest.mark.parametrize(
    "builtin",
    [
        {"type": "web_search_preview"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com"},
        {"type": "image_generation"},
    ],
)
def test_builtin_tools_are_declared_without_names(builtin: dict[str, object]) -> None:
    tools = declared_tools({"tools": [builtin]})
    assert tools.declared is True
    assert tools.names == frozenset()
    assert tools.params == {}
    assert tools != NO_TOOLS


def test_builtin_next_to_a_function_tool() -> None:
    body = {
        "tools": [
            {"type": "web_search_preview"},
            {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA},
        ]
    }
    tools = declared_tools(body)
    assert tools.names == {"get_weather"}


@pytest.mark.parametrize(
    "entry",
    [
        "get_weather",
        None,
        42,
        ["get_weather"],
        {},
        {"type": "function"},
        {"type": "function", "function": {}},
        {"type": "function", "function": {"name": 7}},
        {"type": "function", "function": {"name": ""}},
        {"type": "function", "function": {"name": None}},
        {"type": "function", "function": "get_weather"},
        {"type": "function", "name": ["get_weather"]},
        {"name": {"nested": "get_weather"}},
    ],
)
def test_malformed_entries_are_skipped_but_tools_still_declared(entry: object) -> None:
    body = {"tools": [entry, {"type": "function", "function": {"name": "ok_tool"}}]}
    tools = declared_tools(body)
    assert tools.declared is True
    assert tools.names == {"ok_tool"}


def test_only_malformed_entries_still_declare_tools() -> None:
    tools = declared_tools({"tools": ["x", {"function": {"name": 3}}]})
    assert tools.declared is True
    assert tools.names == frozenset()


@pytest.mark.parametrize(
    "parameters",
    [None, "not a schema", {"type": "object"}, {"properties": ["city"]}, {"properties": None}],
)
def test_odd_parameters_give_no_param_names(parameters: object) -> None:
    body = {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}
    tools = declared_tools(body)
    assert tools.names == {"f"}
    assert tools.params == {"f": frozenset()}


def test_non_string_property_keys_are_ignored() -> None:
    body = {"functions": [{"name": "f", "parameters": {"properties": {"a": {}, 1: {}}}}]}
    assert declared_tools(body).params == {"f": {"a"}}


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"tools": []},
        {"functions": []},
        {"tools": [], "functions": []},
        {"tools": None},
        {"tools": {"type": "function", "function": {"name": "not_in_a_list"}}},
        {"tools": "get_weather"},
        None,
        [],
        "tools",
    ],
)
def test_no_tools(body: object) -> None:
    tools = declared_tools(body)
    assert tools == NO_TOOLS
    assert tools.declared is False
    assert tools.names == frozenset()


def test_json_schema_response_format_is_not_inspected() -> None:
    body = {
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}},
        },
    }
    assert declared_tools(body) == NO_TOOLS


def test_responses_text_format_json_schema_is_not_inspected() -> None:
    body = {
        "tools": [{"type": "function", "name": "get_weather"}],
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {}}},
    }
    assert declared_tools(body) == NO_TOOLS


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "text"}},
        {"response_format": "json_schema"},
        {"text": {"format": {"type": "text"}}},
        {"text": {"format": "json_schema"}},
        {"text": "json_schema"},
    ],
)
def test_other_formats_are_still_inspected(extra: dict[str, object]) -> None:
    body = {"tools": [{"type": "function", "function": {"name": "get_weather"}}], **extra}
    tools = declared_tools(body)
    assert tools.declared is True
    assert tools.names == {"get_weather"}


def test_no_tools_constant() -> None:
    assert ToolSet() == NO_TOOLS
    assert NO_TOOLS.declared is False
    assert NO_TOOLS.names == frozenset()
    assert NO_TOOLS.all_params == frozenset()


def test_request_body_is_not_modified() -> None:
    body = {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    before = repr(body)
    declared_tools(body)
    assert repr(body) == before


def test_anthropic_tools_are_read_with_their_input_schema() -> None:
    tools = declared_tools(
        {
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "input_schema": {"type": "object", "properties": {"city": {}}},
                },
                {"type": "custom", "name": "Read", "input_schema": {"properties": {"path": {}}}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            ]
        }
    )
    assert tools.declared
    assert tools.names == {"get_weather", "Read"}  # a server tool binds no text to a call
    assert tools.params == {"get_weather": {"city"}, "Read": {"path"}}


def test_schemas_in_all_four_spellings() -> None:
    anthropic_schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    body = {
        "tools": [
            {"type": "function", "function": {"name": "chat_tool", "parameters": WEATHER_SCHEMA}},
            {"type": "function", "name": "responses_tool", "parameters": {"type": "object"}},
            {"name": "anthropic_tool", "input_schema": anthropic_schema},
            {"type": "function", "function": {"name": "bare_tool"}},
        ],
        "functions": [{"name": "legacy_fn", "parameters": {"properties": {"n": {}}}}],
    }
    tools = declared_tools(body)
    assert tools.schemas == {
        "chat_tool": WEATHER_SCHEMA,
        "responses_tool": {"type": "object"},
        "anthropic_tool": anthropic_schema,
        "legacy_fn": {"properties": {"n": {}}},
    }
    assert "bare_tool" in tools.names and "bare_tool" not in tools.schemas
    assert NO_TOOLS.schemas == {}


def test_the_tables_are_read_only_when_a_text_may_hold_a_call() -> None:
    from spillguard.detect import may_find

    tools = declared_tools({"tools": [{"type": "function", "function": {"name": "get_weather"}}]})
    assert not may_find("Sunny and 21 degrees in Lisbon.", tools)
    assert not {"_tables", "names"} & vars(tools).keys()  # a plain answer reads no tool
    assert may_find('{"name": "get_weather"}', tools)
    assert tools.names == {"get_weather"}


# ---- a long request, its tools left unread (`jsonread.loads_leaving`) ------------------------

SCHEMAS = st.one_of(
    st.none(),
    st.just(WEATHER_SCHEMA),
    st.fixed_dictionaries({"properties": st.dictionaries(st.text(max_size=3), st.just({}))}),
    st.integers(),
)
NAMES = st.sampled_from(["get_weather", "ping", "", "f"]) | st.integers()
ENTRIES = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function", "custom"]),
            "function": st.fixed_dictionaries({"name": NAMES, "parameters": SCHEMAS}),
        }
    ),
    st.fixed_dictionaries({"name": NAMES, "input_schema": SCHEMAS}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["function", "web_search"]), "name": NAMES, "parameters": SCHEMAS}
    ),
    st.none(),
    st.text(max_size=3),
)
ABSENT = object()
TOOL_VALUES = st.just(ABSENT) | st.none() | st.lists(ENTRIES, max_size=4) | st.text(max_size=3)


def _tables(tools: ToolSet) -> tuple[object, ...]:
    return tools.declared, tools.names, dict(tools.params), dict(tools.schemas), tools.all_params


def _both(raw: bytes) -> tuple[ToolSet, ToolSet]:
    """The tools of `raw` read whole, and read leaving the wire's keys unread."""
    return declared_tools(json.loads(raw)), declared_tools(loads_leaving(raw, chat.WIRE.unread))


@settings(max_examples=300)
@given(TOOL_VALUES, TOOL_VALUES, st.booleans())
def test_a_long_request_declares_what_a_whole_read_declares(
    tools: object, functions: object, spaced: bool
) -> None:
    body: dict[str, object] = {"messages": [], "pad": "x" * LEAVE_FROM}
    body |= {k: v for k, v in (("tools", tools), ("functions", functions)) if v is not ABSENT}
    raw = json.dumps(body, indent=1 if spaced else None).encode()
    whole, left = _both(raw)
    assert _tables(left) == _tables(whole)
    assert (left is NO_TOOLS) is (whole is NO_TOOLS)


@pytest.mark.parametrize(
    "tools",
    [b"[]", b"[ \n\t\r ]", b"[ {} ]", b"[[]]", b"null", b'"[]"', b"{}", b"[\n null]", b"[1e999]"],
)
def test_a_long_request_s_unread_tools_declare_what_a_whole_read_declares(tools: bytes) -> None:
    raw = b'{"pad": "' + b"x" * LEAVE_FROM + b'", "tools": ' + tools + b"}"
    whole, left = _both(raw)
    assert _tables(left) == _tables(whole)


def test_unread_tools_are_read_only_when_asked_for() -> None:
    entry = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
    raw = json.dumps({"pad": "x" * LEAVE_FROM, "tools": [entry]}).encode()
    tools = declared_tools(loads_leaving(raw, chat.WIRE.unread))
    assert tools.declared and tools.unread is not None and tools.entries == ()
    assert tools.names == {"get_weather"}
    assert tools.schemas == {"get_weather": WEATHER_SCHEMA}


def test_tools_and_functions_both_unread_keep_their_order() -> None:
    later = {"name": "f", "parameters": {"properties": {"b": {}}}}
    first = {"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {}}}}}
    raw = json.dumps({"pad": "x" * LEAVE_FROM, "tools": [first], "functions": [later]}).encode()
    whole, left = _both(raw)
    assert left.params == whole.params == {"f": {"b"}}  # the later entry wins in both


# ---- tool arrays seen lately (`KnownTools`) ---------------------------------------------------


def _request(name: str, pad: str = "", **extra: object) -> bytes:
    entry = {"type": "function", "function": {"name": name, "parameters": WEATHER_SCHEMA}}
    body = {"pad": "x" * LEAVE_FROM + pad, "messages": [], "tools": [entry], **extra}
    return json.dumps(body).encode()


def _known(raw: bytes, known: KnownTools) -> ToolSet:
    return declared_tools(loads_leaving(raw, chat.WIRE.unread), known)


def test_a_repeated_tool_array_is_one_tool_set_read_once() -> None:
    known = KnownTools()
    first = _known(_request("get_weather", pad="turn 1"), known)
    assert first.names == {"get_weather"}
    again = _known(_request("get_weather", pad="turn 2, a longer conversation"), known)
    assert again is first  # its tables already read
    assert _tables(again) == _tables(declared_tools(json.loads(_request("get_weather"))))
    other = _known(_request("get_forecast"), known)
    assert other is not first and other.names == {"get_forecast"}


def test_a_known_array_is_kept_as_its_own_bytes() -> None:
    raw = _request("get_weather")
    before = sys.getrefcount(raw)
    tools = _known(raw, known := KnownTools())
    assert sys.getrefcount(raw) == before  # nothing kept refers to the request's bytes
    viewing = declared_tools(loads_leaving(raw, chat.WIRE.unread))  # an unread view, unkept
    assert sys.getrefcount(raw) == before + 1 and viewing.unread is not None
    assert tools.unread is not None
    array = json.dumps(json.loads(raw)["tools"]).encode()
    assert json.loads(bytes(tools.unread)) == json.loads(array)
    assert bytes(tools.unread) in raw and len(bytes(tools.unread)) < len(raw) - LEAVE_FROM
    assert list(known.sets) == [bytes(tools.unread)] and known.held == len(bytes(tools.unread))


def test_what_the_request_says_beside_its_array_still_counts() -> None:
    known = KnownTools()
    assert _known(_request("get_weather"), known).declared
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    assert _known(_request("get_weather", response_format=fmt), known) is NO_TOOLS


def test_known_arrays_are_held_to_their_count_and_size_least_lately_used_given_up_first() -> None:
    known = KnownTools(count=2, size=10_000)
    a, b, c = (_known(_request(name), known) for name in ("a", "b", "c"))
    assert list(known.sets.values()) == [b, c]  # a, the least lately used, given up for c
    assert known.held == sum(len(k) for k in known.sets)
    assert _known(_request("b"), known) is b  # now the latest used
    again = _known(_request("a"), known)  # read again, as new: c given up, not b
    assert again is not a and list(known.sets.values()) == [b, again]
    small = KnownTools(size=len(bytes(a.unread or b"")) + 1)
    first = _known(_request("a"), small)
    second = _known(_request("b"), small)  # fits only alone: a is given up
    assert list(small.sets.values()) == [second] and _known(_request("a"), small) is not first
    too_long = KnownTools(size=10)
    tools = _known(_request("get_weather"), too_long)
    assert tools.names == {"get_weather"} and not too_long.sets and too_long.held == 0
