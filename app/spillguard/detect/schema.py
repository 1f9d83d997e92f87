"""A tool's declared JSON Schema: validating a call's arguments against it.

Schemas come from clients, with every request. They are validated by `jsonschema` (it
interprets the schema; it never generates or runs code from it), the draft chosen by `$schema`
(2020-12 when absent or unknown). Three things the library would do are closed off, since the
schema is the client's and the proxy's event loop is everyone's: it fetches a remote `$ref` over
HTTP (here every validator gets a registry that retrieves nothing, so such a `$ref` is
unresolvable); it searches `pattern`s with `re`, without a time limit (here with `regex`, all
of one leak's searches within PATTERN_SECONDS); and it checks `uniqueItems` pairwise (here in
linear time). A compiled validator is cached per schema, keyed by the schema's canonical JSON,
in a bounded LRU: the same tools arrive request after request. A schema that is itself invalid,
or that fails while validating (an unresolvable `$ref`, patterns out of time), validates
nothing: the caller falls back to the retry. Bare-text values are typed by the schema
beforehand, in `values`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs shipped; used through Any
import regex
from referencing import Registry

Validator = Any  # a jsonschema validator instance or class (the library ships no types)

CACHE_SIZE = 256
# How long the `pattern`s of a client's schema may search, in all, while a leak's calls are
# validated (`pattern_budget`): a pattern that backtracks catastrophically must not stall the
# event loop; past this the arguments are not valid.
PATTERN_SECONDS = 0.05
_PATTERNS_UNTIL: ContextVar[float] = ContextVar("patterns_until", default=0.0)


@contextmanager
def pattern_budget() -> Iterator[None]:
    """PATTERN_SECONDS for every pattern search inside, unless an outer budget is running."""
    if _PATTERNS_UNTIL.get() > 0:
        yield
        return
    token = _PATTERNS_UNTIL.set(time.monotonic() + PATTERN_SECONDS)
    try:
        yield
    finally:
        _PATTERNS_UNTIL.reset(token)


def _search(pattern: str, text: str) -> bool:
    left = _PATTERNS_UNTIL.get() - time.monotonic()
    if left <= 0:
        raise TimeoutError("the schema's patterns ran out of time")
    return regex.search(pattern, text, timeout=left) is not None


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Validator, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _normal(value: Any) -> Any:
    """Equal values under JSON Schema's equality normalised alike (1 and 1.0; never 1 and
    true)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _unique_items(validator: Validator, unique: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's own check compares unsortable items pairwise: quadratic in a list the model
    wrote. Here each item's canonical JSON goes into a set."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_normal(item), sort_keys=True)
        if key in seen:
            yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _drafts() -> dict[str, Validator]:
    """Each draft's validator by its meta-schema URI (without `#`, http or https), its
    `pattern` keywords searched with a time limit (jsonschema's own use `re`, without one) and
    `uniqueItems` checked in linear time."""
    out: dict[str, Validator] = {}
    for cls in (
        jsonschema.Draft202012Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft4Validator,
        jsonschema.Draft3Validator,
    ):
        bounded = jsonschema.validators.extend(
            cls,
            {
                "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "uniqueItems": _unique_items,
            },
        )
        uri = str(cls.META_SCHEMA.get("$id", cls.META_SCHEMA.get("id", ""))).rstrip("#")
        out[uri] = out[uri.replace("https://", "http://")] = bounded
    return out


_DRAFTS = _drafts()
_DEFAULT = _DRAFTS["https://json-schema.org/draft/2020-12/schema"]


# An empty registry's `retrieve` refuses every URI: only refs within the schema resolve (the
# validators and `values`' typing both use it).
LOCAL_ONLY: Registry[Any] = Registry()


def canonical(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=CACHE_SIZE)
def _compiled(key: str) -> Validator | None:
    """The validator of one schema (given as its canonical JSON), or None if it is invalid."""
    try:
        schema = json.loads(key)
        if isinstance(schema, dict):
            uri = schema.get("$schema")
            draft = _DRAFTS.get(uri.rstrip("#"), None) if isinstance(uri, str) else None
            cls = draft or _DEFAULT
        elif isinstance(schema, bool):
            cls = _DEFAULT
        else:
            return None
        cls.check_schema(schema)
        return cls(schema, registry=LOCAL_ONLY)
    except Exception:  # a client's schema may break the library in any way: no repair
        return None


def validator(schema: Any) -> Validator | None:
    """The cached validator of `schema`, or None if it is not a valid JSON Schema."""
    try:
        key = canonical(schema)
    except (TypeError, ValueError, RecursionError):
        return None
    return _compiled(key)


def valid(arguments: Mapping[str, Any], schema: Any) -> bool:
    """Whether `arguments` satisfy `schema`; an invalid schema satisfies nothing."""
    check = validator(schema)
    if check is None:
        return False
    with pattern_budget():
        try:
            return bool(check.is_valid(arguments))
        except Exception:  # an unresolvable $ref, patterns out of time: no repair
            return False
