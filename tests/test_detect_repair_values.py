"""Bare-text values typed by a schema that keeps its types behind local `$ref`s: JSON pointers
into `$defs`, `definitions` or `properties`, anchors and `$id`s, a `$ref` at the root, `allOf`
wrappers; cycles and long chains are cut; nothing remote is ever fetched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spillguard.detect import Call, declared_tools, read_calls, values
from spillguard.detect.values import Untyped
from tests.loopback import schema_server


def invoke(**params: str) -> str:
    inner = "".join(f'<parameter name="{k}">{v}</parameter>' for k, v in params.items())
    return f'<minimax:tool_call><invoke name="act">{inner}</invoke></minimax:tool_call>'


def repair(parameters: Any, **params: str) -> tuple[Call, ...] | None:
    tools = declared_tools(
        {"tools": [{"type": "function", "function": {"name": "act", "parameters": parameters}}]}
    )
    return read_calls(invoke(**params), "minimax", tools)


def typed(schema: Any, **params: str) -> dict[str, Any]:
    return values.typed({k: Untyped(v) for k, v in params.items()}, schema)


QTY = {"type": "integer", "minimum": 1}


@pytest.mark.parametrize(
    ("parameters", "arguments"),
    [
        pytest.param(
            {"$defs": {"qty": QTY}, "properties": {"n": {"$ref": "#/$defs/qty"}}},
            '{"n":3}',
            id="defs",
        ),
        pytest.param(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"qty": QTY},
                "properties": {"n": {"$ref": "#/definitions/qty"}},
            },
            '{"n":3}',
            id="draft-07-definitions",
        ),
        pytest.param(
            {
                "$ref": "#/definitions/Args",
                "definitions": {"Args": {"type": "object", "properties": {"n": QTY}}},
            },
            '{"n":3}',
            id="root-ref",
        ),
        pytest.param(
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": QTY},
                "properties": {"n": {"$ref": "#/$defs/a"}},
            },
            '{"n":3}',
            id="chain",
        ),
        pytest.param(
            {"properties": {"m": QTY, "n": {"$ref": "#/properties/m"}}},
            '{"n":3}',
            id="pointer-into-properties",
        ),
        pytest.param(
            {"$defs": {"a/b c": QTY}, "properties": {"n": {"$ref": "#/$defs/a~1b%20c"}}},
            '{"n":3}',
            id="escaped-pointer",
        ),
        pytest.param(
            {
                "$defs": {"qty": {"$anchor": "count", **QTY}},
                "properties": {"n": {"$ref": "#count"}},
            },
            '{"n":3}',
            id="anchor",
        ),
        pytest.param(
            {
                "$defs": {"Level": {"enum": [1, 2, 3]}},
                "properties": {"n": {"allOf": [{"$ref": "#/$defs/Level"}], "description": "d"}},
            },
            '{"n":3}',
            id="allOf-wrapper",
        ),
        pytest.param(
            {
                "$defs": {"qty": QTY},
                "properties": {"n": {"anyOf": [{"$ref": "#/$defs/qty"}, {"type": "null"}]}},
            },
            '{"n":3}',
            id="nullable",
        ),
        pytest.param(
            {
                "$defs": {"flag": {"type": "boolean"}},
                "additionalProperties": {"$ref": "#/$defs/flag"},
            },
            '{"n":true}',
            id="additionalProperties",
        ),
    ],
)
def test_values_behind_local_refs_are_typed(parameters: Any, arguments: str) -> None:
    value = "true" if "true" in arguments else "3"
    assert repair(parameters, n=value) == (Call("act", arguments),)


def test_a_nullable_ref_reads_null() -> None:
    parameters = {
        "$defs": {"qty": QTY},
        "properties": {"n": {"anyOf": [{"$ref": "#/$defs/qty"}, {"type": "null"}]}},
    }
    assert repair(parameters, n="null") == (Call("act", '{"n":null}'),)
    assert repair(parameters, n="0") is None  # typed, then refused by the schema


def test_a_ref_is_resolved_against_its_own_id() -> None:
    # Inside a schema with its own `$id`, `#/$defs/n` is that schema's, not the root's.
    parameters = {
        "$id": "https://example.invalid/root",
        "$defs": {"n": {"type": "string"}},
        "properties": {
            "n": {
                "$id": "https://example.invalid/inner",
                "$defs": {"n": {"type": "integer"}},
                "$ref": "#/$defs/n",
            }
        },
    }
    assert repair(parameters, n="3") == (Call("act", '{"n":3}'),)


def test_a_string_behind_a_ref_keeps_its_text() -> None:
    parameters = {
        "$defs": {"code": {"type": "string"}},
        "properties": {"n": {"$ref": "#/$defs/code"}},
    }
    assert repair(parameters, n="007") == (Call("act", '{"n":"007"}'),)


@pytest.mark.parametrize(
    "ref", ["#/$defs/missing", "#nowhere", "#/$defs/qty/type/deeper", "%zz", "#/$defs/0"]
)
def test_a_ref_that_names_nothing_types_nothing(ref: str) -> None:
    schema = {"$defs": {"qty": QTY}, "properties": {"n": {"$ref": ref}}}
    assert typed(schema, n="3") == {"n": "3"}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"$schema": 5, "properties": {"n": QTY}}, 3),  # read as 2020-12, as validation does
        ({"$id": 5, "properties": {"n": {"$ref": "#/x"}}}, "3"),
        ({"$defs": [1], "properties": {"n": {"$ref": "#/$defs/a"}}}, "3"),
        ({"properties": {"n": {"$ref": 5}}}, "3"),
        ({"properties": {"n": {"anyOf": "not a list", "$ref": None}}}, "3"),
        (None, "3"),
        (True, "3"),
        (["not", "a", "schema"], "3"),
    ],
)
def test_odd_schemas_never_raise(schema: Any, expected: Any) -> None:
    assert typed(schema, n="3") == {"n": expected}


def test_cycles_end_and_still_find_the_type() -> None:
    schema = {
        "$defs": {
            "a": {"anyOf": [{"$ref": "#/$defs/b"}]},
            "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#"}, {"type": "integer"}]},
        },
        "properties": {"n": {"$ref": "#/$defs/a"}},
    }
    assert typed(schema, n="3") == {"n": 3}
    assert typed({"$ref": "#"}, n="3") == {"n": "3"}  # the root names itself: no properties


def shared(levels: int) -> dict[str, Any]:
    """Each level names the next twice, and the last says nothing: read naively, 2**levels
    paths, which would spend every hop before the integer after them."""
    defs: dict[str, Any] = {
        f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"l{levels}"] = {"description": "says nothing"}
    defs["int"] = {"type": "integer"}
    branches = [{"$ref": "#/$defs/l0"}, {"$ref": "#/$defs/int"}]
    return {"$defs": defs, "properties": {"n": {"anyOf": branches}}}


def test_a_shared_definition_is_read_once() -> None:
    assert typed(shared(20), n="3") == {"n": 3}


def chain(length: int) -> dict[str, Any]:
    """`n` reaches its integer through `length` refs."""
    defs: dict[str, Any] = {f"r{i}": {"$ref": f"#/$defs/r{i + 1}"} for i in range(length - 1)}
    defs[f"r{length - 1}"] = {"type": "integer"}
    return {"$defs": defs, "properties": {"n": {"$ref": "#/$defs/r0"}}}


def test_refs_are_followed_up_to_the_bound() -> None:
    assert typed(chain(values.REF_HOPS), n="3") == {"n": 3}
    assert typed(chain(values.REF_HOPS + 1), n="3") == {"n": "3"}


def test_nesting_is_read_up_to_the_bound() -> None:
    def nested(depth: int) -> dict[str, Any]:
        inner: dict[str, Any] = {"type": "integer"}
        for _ in range(depth):
            inner = {"anyOf": [inner]}
        return {"properties": {"n": inner}}

    assert typed(nested(values.DEPTH), n="3") == {"n": 3}
    assert typed(nested(values.DEPTH + 1), n="3") == {"n": "3"}
    assert typed(nested(5000), n="3") == {"n": "3"}  # no RecursionError


def test_values_the_model_typed_itself_are_kept() -> None:
    schema = {"$defs": {"qty": QTY}, "properties": {"n": {"$ref": "#/$defs/qty"}}}
    assert values.typed({"n": "3", "m": 4}, schema) == {"n": "3", "m": 4}


@pytest.fixture
def loopback() -> Iterator[tuple[str, list[str]]]:
    with schema_server(b'{"type": "integer"}') as served:
        yield served


def test_remote_refs_are_never_fetched_for_typing(loopback: tuple[str, list[str]]) -> None:
    url, hits = loopback
    assert typed({"properties": {"n": {"$ref": url}}}, n="3") == {"n": "3"}
    assert typed({"$ref": url}, n="3") == {"n": "3"}
    relative = {"$id": url, "properties": {"n": {"$ref": "other.json"}}}
    assert typed(relative, n="3") == {"n": "3"}
    assert repair({"properties": {"n": {"$ref": url}}}, n="3") is None
    assert hits == []
