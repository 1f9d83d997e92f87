"""What a request declared: the tool names, their parameter names and schemas, read
defensively."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..jsonread import Unread, value


@dataclass(frozen=True)
class ToolSet:
    """The function tools a request declared. `declared` is true even when no name is readable
    (built-in tools, malformed entries): the request still asked for tool calling. `entries`
    are the request's tool entries as it wrote them; `names`, `params` (each tool's parameter
    names) and `schemas` (each tool's parameter JSON Schema as the request wrote it; a tool
    without one takes any object) are read from them when first asked for, which a reply with
    no marker's needle in it and no structured call never does. `unread`: instead of
    `entries`, the request's one tool array as its raw JSON (`jsonread.Unread`, from a long
    request), read then too."""

    declared: bool = False
    entries: tuple[Any, ...] = ()
    unread: Unread | None = None

    @cached_property
    def _tables(self) -> tuple[dict[str, frozenset[str]], dict[str, Any]]:
        params: dict[str, frozenset[str]] = {}
        schemas: dict[str, Any] = {}
        entries = self.entries if self.unread is None else value(self.unread)
        for entry in entries:
            read = _read(entry)
            if read is not None:
                name, schema = read
                params[name] = _param_names(schema)
                if schema is not None:
                    schemas[name] = schema
                else:
                    schemas.pop(name, None)  # a later entry of the same name wins, as for params
        return params, schemas

    @cached_property
    def names(self) -> frozenset[str]:
        return frozenset(self._tables[0])

    @property
    def params(self) -> Mapping[str, frozenset[str]]:
        return self._tables[0]

    @property
    def schemas(self) -> Mapping[str, Any]:
        return self._tables[1]

    @cached_property  # read by every blob probe: once per ToolSet
    def all_params(self) -> frozenset[str]:
        return frozenset().union(*self.params.values())


NO_TOOLS = ToolSet()


def _param_names(schema: Any) -> frozenset[str]:
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            return frozenset(k for k in props if isinstance(k, str))
    return frozenset()


def _read(entry: Any) -> tuple[str, Any] | None:
    """One tool entry in any of the four spellings: Chat Completions nested, legacy
    `functions`, Responses flat, Anthropic Messages (`name`, `input_schema`, type absent or
    `custom`): its name and its parameter schema (None when absent)."""
    if not isinstance(entry, dict):
        return None
    fn = entry.get("function")
    spec = fn if isinstance(fn, dict) else entry
    if fn is None and entry.get("type", "function") not in ("function", "custom"):
        return None  # a built-in tool (web search, code interpreter, MCP): nothing to bind
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        return None
    return name, spec.get("parameters", spec.get("input_schema"))


class KnownTools:
    """The `ToolSet`s of tool arrays seen lately, by the array's bytes as a request wrote it:
    an agent sends the same array every turn, and one `ToolSet`'s tables, read once, serve
    every turn (reading them costs about 9 µs for the bench's three tools, where finding the
    array here costs 0.5). At most `count` arrays of `size` bytes in all, the one least lately
    used given up first; an array longer than `size` is not kept. Each is kept as its own bytes,
    never as a view of the request that brought it; its tables, once read, take about 5.5 times
    its bytes more (a 55 KB array of 120 tools: 301 KB in all, by tracemalloc)."""

    __slots__ = ("count", "held", "sets", "size")

    def __init__(self, count: int = 64, size: int = 1024 * 1024) -> None:
        self.count = count
        self.size = size
        self.held = 0  # bytes of the arrays kept
        self.sets: dict[bytes, ToolSet] = {}  # least lately used first

    def __call__(self, raw: Unread) -> ToolSet:
        """The `ToolSet` of one unread array of one item or more."""
        key = bytes(raw)
        sets = self.sets
        known = sets.pop(key, None)
        if known is not None:
            sets[key] = known  # now the latest used
            return known
        tools = ToolSet(declared=True, unread=Unread(key))
        if len(key) <= self.size:
            while sets and (len(sets) >= self.count or self.held + len(key) > self.size):
                oldest = next(iter(sets))
                del sets[oldest]
                self.held -= len(oldest)
            sets[key] = tools
            self.held += len(key)
        return tools


def declared_tools(body: Any, known: KnownTools | None = None) -> ToolSet:
    """The tools a request body declared, or NO_TOOLS when it declared none or must not be
    inspected (a `json_schema` response format: the client validates that content itself).
    With `known`, one unread array's tools are those of the same bytes seen lately."""
    if not isinstance(body, dict):
        return NO_TOOLS
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return NO_TOOLS
    text = body.get("text")  # Responses API spelling of response_format
    if isinstance(text, dict):
        tfmt = text.get("format")
        if isinstance(tfmt, dict) and tfmt.get("type") == "json_schema":
            return NO_TOOLS
    given = [
        got
        for key in ("tools", "functions")
        if (isinstance(got := body.get(key), list) and got)
        or (type(got) is Unread and _has_items(got))
    ]
    if not given:
        return NO_TOOLS
    if len(given) == 1 and type(given[0]) is Unread:
        if known is not None:
            return known(given[0])
        return ToolSet(declared=True, unread=given[0])
    return ToolSet(declared=True, entries=tuple(e for v in given for e in value(v)))


def _has_items(raw: Unread) -> bool:
    """The raw JSON value (valid, as msgspec skipped it) is an array of one item or more."""
    text = memoryview(raw)  # no copy of the whole array for its first few bytes
    i = 1
    while i < len(text) and text[i] in b" \t\r\n":
        i += 1
    return text[0] == ord("[") and i < len(text) and text[i] != ord("]")
