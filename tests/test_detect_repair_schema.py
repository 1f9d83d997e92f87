"""The schema side of repair: the draft chosen by `$schema`, validators cached per canonical
schema (bounded), client schemas that are invalid or break validation mean no repair, never a
crash; nested objects and arrays, required keys, enums, additionalProperties."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from spillguard.detect import Call, declared_tools, read_calls
from spillguard.detect import schema as sch
from tests.loopback import schema_server


def tools_with(parameters: Any) -> Any:
    return declared_tools(
        {"tools": [{"type": "function", "function": {"name": "act", "parameters": parameters}}]}
    )


def repair(arguments: str, parameters: Any) -> tuple[Call, ...] | None:
    text = f'<tool_call>{{"name": "act", "arguments": {arguments}}}</tool_call>'
    return read_calls(text, "hermes", tools_with(parameters))


ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "ship": {
            "type": "object",
            "properties": {"speed": {"enum": ["slow", "fast"]}},
            "required": ["speed"],
        },
    },
    "required": ["items"],
}


@pytest.mark.parametrize(
    ("arguments", "ok"),
    [
        ('{"items": [{"sku": "a1", "qty": 2}]}', True),
        ('{"items": [{"sku": "a1", "qty": 2}], "ship": {"speed": "fast"}}', True),
        ('{"items": []}', False),
        ('{"items": [{"sku": "a1"}]}', False),
        ('{"items": [{"sku": "a1", "qty": 2.5}]}', False),
        ('{"items": [{"sku": "a1", "qty": 2, "gift": true}]}', False),
        ('{"items": [{"sku": "a1", "qty": 2}], "ship": {"speed": "warp"}}', False),
        ('{"items": [{"sku": "a1", "qty": 2}], "ship": {}}', False),
        ('{"ship": {"speed": "slow"}}', False),
    ],
)
def test_nested_objects_and_arrays(arguments: str, ok: bool) -> None:
    assert (repair(arguments, ORDER) is not None) is ok


def test_draft_by_dollar_schema() -> None:
    # Draft 7 reads `dependencies`; 2020-12 dropped it in favour of `dependentRequired`.
    base = {"properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}}
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **base}
    assert repair('{"a": 1}', draft7) is None
    assert repair('{"a": 1}', base) is not None  # 2020-12 by default: an unknown keyword

    def draft_of(schema: Any) -> Any:
        return sch.validator(schema).META_SCHEMA["$id"]

    assert draft_of(draft7) == jsonschema.Draft7Validator.META_SCHEMA["$id"]
    assert draft_of(base) == jsonschema.Draft202012Validator.META_SCHEMA["$id"]
    unknown = {"$schema": "https://example.invalid/my-schema", "type": "object"}
    assert draft_of(unknown) == jsonschema.Draft202012Validator.META_SCHEMA["$id"]


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "not-a-type"},
        {"properties": {"a": {"type": 7}}},
        {"required": "a"},
        {"pattern": "("},  # not a regular expression
        {"$ref": "https://example.invalid/remote.json"},  # never fetched: unresolvable
        {"$ref": "#/$defs/missing"},
        "a string is no schema",
        [1, 2],
    ],
)
def test_invalid_schemas_repair_nothing(parameters: Any) -> None:
    assert repair("{}", parameters) is None


def test_boolean_and_absent_schemas() -> None:
    assert repair('{"x": 1}', True) == (Call("act", '{"x":1}'),)
    assert repair('{"x": 1}', False) is None
    absent = declared_tools({"tools": [{"type": "function", "function": {"name": "act"}}]})
    text = '<tool_call>{"name": "act", "arguments": {"x": 1}}</tool_call>'
    assert read_calls(text, "hermes", absent) == (Call("act", '{"x":1}'),)


def test_local_refs_resolve() -> None:
    parameters = {
        "$defs": {"qty": {"type": "integer", "minimum": 1}},
        "properties": {"n": {"$ref": "#/$defs/qty"}},
    }
    assert repair('{"n": 2}', parameters) is not None
    assert repair('{"n": 0}', parameters) is None


def test_validators_are_cached_by_canonical_schema() -> None:
    first = {"type": "object", "properties": {"q": {"type": "string"}}}
    reordered = {"properties": {"q": {"type": "string"}}, "type": "object"}
    assert sch.validator(first) is sch.validator(reordered)
    assert sch.validator(first) is not sch.validator({"type": "object"})


def test_the_cache_is_bounded() -> None:
    for i in range(sch.CACHE_SIZE + 10):
        sch.validator({"type": "object", "maxProperties": i})
    info = sch._compiled.cache_info()
    assert info.currsize <= sch.CACHE_SIZE


def test_remote_refs_are_never_fetched() -> None:
    with schema_server(b'{"type": "object"}') as (url, hits):
        assert repair('{"x": 1}', {"$ref": url}) is None
        assert repair('{"x": 1}', {"properties": {"x": {"$ref": url}}}) is None
    assert hits == []


def test_patterns_still_validate() -> None:
    parameters = {
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "patternProperties": {"^n_": {"type": "integer"}},
    }
    assert repair('{"code": "LHR", "n_seats": 2}', parameters) is not None
    assert repair('{"code": "lhr"}', parameters) is None
    assert repair('{"code": "LHR", "n_seats": "2"}', parameters) is None


def test_a_catastrophic_pattern_is_cut_short() -> None:
    # Without a time limit this search backtracks through 2**40 ways: the repair is refused.
    parameters = {"properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    assert repair('{"q": "' + "a" * 40 + '!"}', parameters) is None
    keys = {"patternProperties": {"^(a|aa)+$": {"type": "integer"}}}
    assert repair('{"' + "a" * 60 + '!": 1}', keys) is None
    # Many values share one budget: it does not restart per value.
    many = {"type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}}
    listed = {"properties": {"q": many}}
    assert repair('{"q": [' + ",".join(['"' + "a" * 30 + '!"'] * 500) + "]}", listed) is None


def test_the_budget_is_shared_by_all_calls_of_a_leak() -> None:
    parameters = {"properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    one = '<tool_call>{"name": "act", "arguments": {"q": "' + "a" * 30 + '!"}}</tool_call>'
    assert read_calls(one * 300, "hermes", tools_with(parameters)) is None
    good = '<tool_call>{"name": "act", "arguments": {"q": "aaa"}}</tool_call>'
    assert read_calls(good * 3, "hermes", tools_with(parameters)) is not None


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ("[1, 2, 3]", True),
        ("[1, 1.0]", False),
        ("[1, true]", True),
        ("[0, false, null]", True),
        ('[{"a": 1, "b": [2]}, {"b": [2.0], "a": 1}]', False),
        ('[{"a": 1}, {"a": 2}]', True),
        ('["1", 1]', True),
    ],
)
def test_unique_items(items: str, unique: bool) -> None:
    parameters = {"properties": {"xs": {"type": "array", "uniqueItems": True}}}
    assert (repair(f'{{"xs": {items}}}', parameters) is not None) is unique


def test_unique_items_of_a_long_list() -> None:
    # Pairwise comparison would take hours here; a set takes moments.
    parameters = {"properties": {"xs": {"type": "array", "uniqueItems": True}}}
    items = ",".join(f'{{"n": {i}}}' for i in range(40_000))
    assert repair(f'{{"xs": [{items}]}}', parameters) is not None
    assert repair(f'{{"xs": [{items},{{"n": 7}}]}}', parameters) is None
