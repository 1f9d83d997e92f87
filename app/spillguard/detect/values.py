"""Bare-text parameter values (the XML-ish families write every value as text), typed by the
tool's declared schema.

A value's property schema is read for the JSON types it admits: `type`, `enum`/`const`, and the
branches of `anyOf`, `oneOf` and `allOf`. Local `$ref`s are followed as the validator follows
them (`referencing`: JSON pointers such as `#/$defs/X`, `#/definitions/X` or
`#/properties/a`, anchors, each schema's own `$id`), through a registry that retrieves nothing,
so a remote `$ref` says nothing and is never fetched. A schema is read once per value (a cycle or
a shared definition adds nothing the second time), at most REF_HOPS `$ref`s are followed and
DEPTH branches nested; past them a schema says nothing. The types of a schema and of its `$ref`
and branches are pooled (drafts 4 to 7 ignore a `$ref`'s siblings, later drafts apply both): a
reading can only be too generous, and a wrong one cannot make a repair, since the typed
arguments are still validated against the whole schema.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from referencing import Specification
from referencing.jsonschema import DRAFT202012, specification_with

from .schema import LOCAL_ONLY

if TYPE_CHECKING:
    from referencing._core import Resolver  # exported nowhere public

REF_HOPS = 64  # `$ref`s followed while typing one value
DEPTH = 32  # `anyOf`/`oneOf`/`allOf` nesting read while typing one value


@dataclass(frozen=True)
class Untyped:
    """A parameter value the model wrote as bare text (XML-ish families): its JSON type is
    decided by the tool's schema."""

    text: str


@dataclass(frozen=True)
class _At:
    """A schema, and the resolver its `$ref`s are looked up with (it knows the `$id` in force)."""

    schema: Any
    resolver: Resolver[Any]


class _Reading:
    """One value's walk over a tool's schema, with its bounds."""

    def __init__(self, spec: Specification[Any]) -> None:
        self.spec = spec
        self.seen: set[int] = set()
        self.hops = REF_HOPS

    def into(self, at: _At, schema: Any) -> _At:
        """A subschema of `at`'s, its own `$id` (if any) in force."""
        return _At(schema, at.resolver.in_subresource(self.spec.create_resource(schema)))

    def ref(self, at: _At) -> _At | None:
        """The schema `at`'s `$ref` names, or None: no `$ref`, remote, naming nothing, or the
        hops spent."""
        ref = at.schema.get("$ref") if isinstance(at.schema, dict) else None
        if not isinstance(ref, str) or self.hops <= 0:
            return None
        self.hops -= 1
        try:
            resolved = at.resolver.lookup(ref)
        except Exception:  # referencing's Unresolvable, or a client's odd schema breaking it
            return None
        return _At(resolved.contents, resolved.resolver)

    def property(self, at: _At, key: str) -> _At | None:
        """The schema a key's value is held to: its entry in `properties` (of this schema or
        the one its `$ref` names), else a schema-valued `additionalProperties`, else None."""
        schema = at.schema
        if not isinstance(schema, dict):
            return None
        props = schema.get("properties")
        if isinstance(props, dict) and key in props:
            return self.into(at, props[key])
        target = self.ref(at)
        found = self.property(target, key) if target is not None else None
        if found is not None:
            return found
        extra = schema.get("additionalProperties")
        return self.into(at, extra) if isinstance(extra, dict) else None

    def types(self, at: _At, depth: int = 0) -> set[str]:
        """The JSON types a schema admits; empty when it says nothing."""
        schema = at.schema
        if not isinstance(schema, dict) or id(schema) in self.seen or depth > DEPTH:
            return set()
        self.seen.add(id(schema))
        out = _own_types(schema)
        for key in ("anyOf", "oneOf", "allOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                for branch in branches:
                    out |= self.types(self.into(at, branch), depth + 1)
        target = self.ref(at)
        if target is not None:
            out |= self.types(target, depth)  # bounded by the hops
        return out


def _own_types(schema: dict[str, Any]) -> set[str]:
    """The types a schema names itself, in `type` and `enum`/`const`."""
    out: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        out.add(declared)
    elif isinstance(declared, list):
        out.update(t for t in declared if isinstance(t, str))
    listed = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(listed, list):
        out.update(_json_type(value) for value in listed)
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@dataclass(frozen=True)
class _Schema:
    """A tool's schema as typing reads it: its dialect (from `$schema`; 2020-12 when absent or
    unknown, as validation has it) and its root."""

    spec: Specification[Any]
    root: _At

    def admitted(self, key: str) -> set[str]:
        """The types the schema admits for `key`'s value, read with bounds of its own."""
        reading = _Reading(self.spec)
        try:
            at = reading.property(self.root, key)
            return reading.types(at) if at is not None else set()
        except Exception:  # a client's schema may break `referencing` in any way: no types
            return set()


def _schema(declared: Any) -> _Schema | None:
    """The tool's schema `declared` ready to be read; None when `referencing` refuses it."""
    try:
        dialect = declared.get("$schema") if isinstance(declared, dict) else None
        spec = DRAFT202012
        if isinstance(dialect, str):
            spec = specification_with(dialect, default=DRAFT202012)
        resolver = LOCAL_ONLY.resolver_with_root(spec.create_resource(declared))
        return _Schema(spec, _At(declared, resolver))
    except Exception:  # a client's schema may break `referencing` in any way: no types
        return None


def typed(arguments: Mapping[str, Any], declared: Any) -> dict[str, Any]:
    """`arguments` with each Untyped value replaced by the value it stands for under its
    property's schema in `declared` (the tool's parameters; None when it has none)."""
    if not any(isinstance(value, Untyped) for value in arguments.values()):
        return dict(arguments)
    schema = _schema(declared)
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if isinstance(value, Untyped):
            value = type_text(value.text, schema.admitted(key) if schema else set())
        out[key] = value
    return out


# ---- reading the text as one of the admitted types ------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,400})(?:\.[0-9]{1,400})?(?:[eE][+-]?[0-9]{1,4})?")


def _number(word: str) -> int | float | None:
    """A JSON number's value, or None (an int only for an integer literal)."""
    if _NUMBER.fullmatch(word) is None:
        return None
    if word.lstrip("-").isdigit():
        return int(word)
    value = float(word)
    return value if math.isfinite(value) else None


def type_text(text: str, types: set[str]) -> Any:
    """The value bare `text` stands for when its schema admits `types`. A schema that admits a
    string (or says nothing) keeps the text verbatim; otherwise the first admitted type the text
    reads as wins; text that reads as none stays a string, for validation to refuse."""
    if not types or "string" in types:
        return text
    word = text.strip()
    if "null" in types and word == "null":
        return None
    if "boolean" in types and word in ("true", "false"):
        return word == "true"
    if types & {"integer", "number"}:
        number = _number(word)
        if isinstance(number, float) and "number" not in types:
            number = int(number) if number.is_integer() else None  # 3.0 is an integer
        if number is not None:
            return number
    if types & {"object", "array"}:
        try:
            value = json.loads(word)
        except (ValueError, RecursionError):
            return text
        if ("object" in types and isinstance(value, dict)) or (
            "array" in types and isinstance(value, list)
        ):
            return value
    return text
