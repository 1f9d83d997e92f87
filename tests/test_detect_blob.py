"""Whole-answer tool-call blobs: JSON call objects, their envelopes, the flattened Grok shape,
Llama's `;` joins and the pythonic list; and the JSON answers that must pass untouched.

A positive example must be found both whole and streamed character by character; a negative one
must publish exactly its input.
"""

from __future__ import annotations

import json

import pytest

from spillguard.detect import NO_TOOLS, Finding, Scanner, declared_tools, inspect_text
from spillguard.detect.blob import BlobProbe, classify


def _fn(name: str, *params: str) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params}},
        },
    }


TOOLS = declared_tools(
    {
        "tools": [
            _fn("get_weather", "city", "unit"),
            _fn("search_docs", "query", "limit"),
            _fn("run_in_terminal", "command"),
            _fn("create_user", "name", "email"),
        ]
    }
)


def run(text: str, chunks: list[str] | None = None, tools=TOOLS) -> tuple[str, Finding | None]:
    scanner = Scanner(tools)
    out = [scanner.feed(c) for c in (chunks if chunks is not None else [text])]
    out.append(scanner.finish())
    return "".join(out), scanner.finding


def check_found(text: str, family: str, name: str) -> None:
    finding = inspect_text(text, TOOLS)
    assert finding is not None
    assert (finding.family, finding.tool_name, finding.start) == (family, name, 0)
    assert finding.excerpt == text
    # Nothing of a blob is ever published, whole or streamed one character at a time.
    assert run(text) == ("", finding)
    assert run(text, list(text)) == ("", finding)


def check_left_alone(text: str, tools=TOOLS) -> None:
    assert inspect_text(text, tools) is None
    assert run(text, tools=tools) == (text, None)
    assert run(text, list(text), tools=tools) == (text, None)


def dumps(value: object) -> str:
    return json.dumps(value)


POSITIVE = [
    pytest.param(
        dumps({"name": "get_weather", "arguments": {"city": "Porto"}}),
        "get_weather",
        id="name-arguments-object",
    ),
    pytest.param(
        dumps({"name": "search_docs", "arguments": dumps({"query": "invoices", "limit": 5})}),
        "search_docs",
        id="name-arguments-json-string",
    ),
    pytest.param(
        dumps({"name": "run_in_terminal", "parameters": {"command": "pytest -q"}}),
        "run_in_terminal",
        id="name-parameters",
    ),
    pytest.param(
        dumps({"tool": "search_docs", "args": {"query": "pricing"}}),
        "search_docs",
        id="tool-args",
    ),
    pytest.param(
        dumps({"tool_name": "get_weather", "input": {"city": "Accra"}}),
        "get_weather",
        id="tool_name-input",
    ),
    pytest.param(
        dumps({"function": "get_weather", "arguments": {"city": "Fez"}}),
        "get_weather",
        id="function-string-arguments",
    ),
    pytest.param(
        dumps({"id": "call_7", "name": "search_docs", "arguments": {}}),
        "search_docs",
        id="with-id",
    ),
    pytest.param(
        dumps({"type": "function", "name": "search_docs", "arguments": {"query": "a"}}),
        "search_docs",
        id="with-type-function",
    ),
    pytest.param(
        '{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Riga"\n  }\n}',
        "get_weather",
        id="pretty-printed",
    ),
    pytest.param(
        '\n  {"name": "get_weather", "arguments": {"city": "Riga"}}  \n\n',
        "get_weather",
        id="surrounding-whitespace",
    ),
    pytest.param(
        '```json\n{"name": "search_docs", "arguments": {"query": "gdpr"}}\n```',
        "search_docs",
        id="json-fence",
    ),
    pytest.param(
        '```\n{"name": "search_docs", "arguments": {"query": "gdpr"}}\n```\n',
        "search_docs",
        id="bare-fence",
    ),
    pytest.param(
        '```JSON\n{"tool": "run_in_terminal", "args": {"command": "ls"}}\n```',
        "run_in_terminal",
        id="uppercase-info-fence",
    ),
    pytest.param(
        dumps(
            [
                {"name": "get_weather", "arguments": {"city": "Baku"}},
                {"name": "search_docs", "arguments": {"query": "visa"}},
            ]
        ),
        "get_weather",
        id="array-of-calls",
    ),
    pytest.param(
        '```json\n[{"name": "search_docs", "arguments": {}}]\n```',
        "search_docs",
        id="fenced-array",
    ),
    pytest.param(
        dumps(
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": dumps({"city": "Tunis"})},
            }
        ),
        "get_weather",
        id="openai-nested",
    ),
    pytest.param(
        dumps({"type": "function", "function": {"name": "search_docs", "arguments": {}}}),
        "search_docs",
        id="openai-nested-without-id",
    ),
    pytest.param(
        dumps(
            {
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "search_docs", "arguments": "{}"},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                ]
            }
        ),
        "search_docs",
        id="envelope-tool_calls",
    ),
    pytest.param(
        dumps({"tool_call": {"name": "run_in_terminal", "arguments": {"command": "id"}}}),
        "run_in_terminal",
        id="envelope-tool_call",
    ),
    pytest.param(
        dumps({"toolCalls": [{"name": "get_weather", "arguments": {"city": "Suva"}}]}),
        "get_weather",
        id="envelope-toolCalls",
    ),
    pytest.param(
        dumps({"id": "call_001", "type": "run_in_terminal", "command": "git branch -a"}),
        "run_in_terminal",
        id="grok-flattened-under-type",
    ),
    pytest.param(
        dumps({"name": "get_weather", "city": "Hobart", "unit": "celsius"}),
        "get_weather",
        id="flattened-under-name",
    ),
    pytest.param(
        dumps({"tool": "create_user", "name": "Ada", "email": "ada@example.com"}),
        "create_user",
        id="flattened-with-param-called-name",
    ),
    pytest.param(
        dumps({"name": "search_docs", "arguments": {"query": 'he said "}" then left'}}),
        "search_docs",
        id="braces-inside-strings",
    ),
]


@pytest.mark.parametrize(("text", "name"), POSITIVE)
def test_json_blob_found(text: str, name: str) -> None:
    check_found(text, "json", name)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        pytest.param(
            '{"name": "search_docs", "parameters": {"query": "a"}}; '
            '{"name": "get_weather", "parameters": {"city": "b"}}',
            "search_docs",
            id="llama-semicolon-joined",
        ),
        pytest.param(
            '{"name": "get_weather", "parameters": {"city": "c"}};'
            '{"name": "get_weather", "parameters": {"city": "d"}}',
            "get_weather",
            id="llama-semicolon-no-space",
        ),
    ],
)
def test_semicolon_joined_blobs_are_llama(text: str, name: str) -> None:
    """Llama 3.x joins several calls with `;`: the layout names the family."""
    check_found(text, "llama", name)


PYTHONIC = [
    pytest.param("[get_weather(city='Porto')]", "get_weather", id="one-call"),
    pytest.param('[search_docs(query="late fees", limit=3)]', "search_docs", id="double-quotes"),
    pytest.param("[search_docs()]", "search_docs", id="no-args"),
    pytest.param("[ run_in_terminal(command='ls -1') ]", "run_in_terminal", id="spaces"),
    pytest.param(
        "[search_docs(query='a', limit=[1, 2], opts={'x': (1, 2)})]",
        "search_docs",
        id="nested-literals",
    ),
    pytest.param("[search_docs(query='a)b(')]", "search_docs", id="parens-in-string"),
]


@pytest.mark.parametrize(("text", "name"), PYTHONIC)
def test_pythonic_list_found(text: str, name: str) -> None:
    check_found(text, "pythonic", name)


def test_pythonic_list_of_two_calls_found() -> None:
    check_found(
        "[get_weather(city='Porto'), search_docs(query='ferries')]", "pythonic", "get_weather"
    )


def test_classify_accepts_two_pythonic_calls() -> None:
    # The exact check agrees with the reference; only the incremental probe rejects it (above).
    text = "[get_weather(city='Porto'), search_docs(query='ferries')]"
    assert classify(text, TOOLS) == ("pythonic", "get_weather")


def test_tilde_fenced_blob_found() -> None:
    check_found('~~~json\n{"name": "search_docs", "arguments": {}}\n~~~', "json", "search_docs")


NEGATIVE = [
    pytest.param(
        'Here is the call: {"name": "get_weather", "arguments": {"city": "Porto"}}',
        id="prose-before",
    ),
    pytest.param(
        '{"name": "get_weather", "arguments": {"city": "Porto"}}\nShall I run it?',
        id="prose-after",
    ),
    pytest.param(
        '```json\n{"name": "search_docs", "arguments": {"query": "x"}}\n```\n'
        "This is the call I would make.",
        id="fence-then-prose",
    ),
    pytest.param(
        'Try this:\n```json\n{"name": "search_docs", "arguments": {}}\n```',
        id="prose-then-fence",
    ),
    pytest.param(
        '{"name": "get_weather", "arguments": {"city": "Porto"}, "confidence": 0.9}',
        id="one-extra-key",
    ),
    pytest.param('{"name": "book_flight", "arguments": {"to": "LIS"}}', id="undeclared-name"),
    pytest.param('{"tool": "Get_Weather", "args": {}}', id="name-case-differs"),
    pytest.param('{"name": "Alice", "age": 3}', id="person-record"),
    pytest.param('{"name": "search_docs", "description": "Searches the docs"}', id="shares-name"),
    pytest.param('{"input": "2 + 2", "output": "4"}', id="shares-input"),
    pytest.param(
        '{"type": "object", "properties": {"name": {"type": "string"}}}', id="json-schema"
    ),
    pytest.param('{"name": "get_weather"}', id="name-without-arguments"),
    pytest.param('{"arguments": {"city": "Porto"}}', id="arguments-without-name"),
    pytest.param('{"name": "get_weather", "arguments": 42}', id="arguments-a-number"),
    pytest.param('{"name": ["get_weather"], "arguments": {}}', id="name-not-a-string"),
    pytest.param(
        '{"name": "get_weather", "arguments": {}, "type": "widget"}', id="type-not-function"
    ),
    pytest.param('{"name": "get_weather", "tool": "search_docs", "arguments": {}}', id="two-names"),
    pytest.param(
        '{"name": "get_weather", "arguments": {}, "parameters": {}}', id="two-argument-keys"
    ),
    pytest.param(
        '{"type": "function", "function": {"name": "get_weather", "arguments": {}, "x": 1}}',
        id="nested-extra-key",
    ),
    pytest.param(
        '{"type": "function", "function": {"name": "book_flight", "arguments": {}}}',
        id="nested-undeclared",
    ),
    pytest.param(
        '{"tool_calls": [{"name": "get_weather", "arguments": {}}], "content": "hi"}',
        id="envelope-extra-key",
    ),
    pytest.param('{"tool_calls": []}', id="empty-envelope"),
    pytest.param(
        '{"id": "call_9", "type": "run_in_terminal", "command": "ls", "cwd": "/tmp"}',
        id="flattened-undeclared-param",
    ),
    pytest.param('{"name": "get_weather", "query": "x"}', id="flattened-other-tools-param"),
    pytest.param('[{"name": "Alice", "age": 3}, {"name": "Bob", "age": 5}]', id="array-of-records"),
    pytest.param(
        '[{"name": "get_weather", "arguments": {}}, {"name": "Bob", "age": 5}]',
        id="array-call-and-record",
    ),
    pytest.param(
        '[{"name": "get_weather", "arguments": {}}, {"name": "book_flight", "arguments": {}}]',
        id="array-with-undeclared",
    ),
    pytest.param('{"name": "get_weather", "arguments": {"city": "Porto"}', id="truncated"),
    pytest.param('{"name": "get_weather", "arguments": {}}}', id="extra-closing-brace"),
    pytest.param('{"name": "get_weather", "arguments": {}};', id="dangling-semicolon"),
    pytest.param('{"query": "ferries"}', id="bare-arguments"),
    pytest.param('"get_weather"', id="json-string"),
    pytest.param("{}", id="empty-object"),
    pytest.param("[]", id="empty-array"),
    pytest.param("[1, 2, 3]", id="array-of-numbers"),
    pytest.param("[get_weather]", id="bracketed-name"),
    pytest.param("[book_flight(to='LIS')]", id="pythonic-undeclared"),
    pytest.param("[get_weather(city=home_city)]", id="pythonic-non-literal-arg"),
    pytest.param("[get_weather(city='Porto')] would do it.", id="pythonic-then-prose"),
    pytest.param("[get_weather(city='Porto')];", id="pythonic-then-semicolon"),
    pytest.param("[os.system('rm -rf /')]", id="pythonic-attribute"),
    pytest.param("get_weather(city='Porto')", id="python-call-without-list"),
    pytest.param("[Release notes](https://example.com)", id="markdown-link"),
    pytest.param("{{name}} is a template", id="template"),
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_json_answer_left_alone(text: str) -> None:
    check_left_alone(text)


def test_blob_never_found_without_declared_names() -> None:
    text = '{"name": "get_weather", "arguments": {"city": "Porto"}}'
    check_left_alone(text, NO_TOOLS)
    builtin_only = declared_tools({"tools": [{"type": "code_interpreter"}]})
    check_left_alone(text, builtin_only)
    check_left_alone("[get_weather(city='Porto')]", NO_TOOLS)


def test_blob_for_another_request_is_left_alone() -> None:
    other = declared_tools({"functions": [{"name": "lookup_order", "parameters": {}}]})
    check_left_alone('{"name": "get_weather", "arguments": {}}', other)
    assert inspect_text('{"name": "lookup_order", "arguments": {}}', other) is not None


# ---------------------------------------------------------------------------------------------
# Big and deep inputs: no crash, and whole and streamed agree.


def agree(text: str) -> tuple[str, Finding | None]:
    published, finding = run(text)
    chunks = [text[i : i + 997] for i in range(0, len(text), 997)]
    assert run(text, chunks) == (published, finding)
    assert published == ("" if finding else text)
    assert inspect_text(text, TOOLS) == finding
    return published, finding


def test_deeply_nested_non_call_json() -> None:
    text = '{"a": ' * 5000 + "1" + "}" * 5000
    assert agree(text) == (text, None)


def test_deeply_nested_arrays() -> None:
    text = "[" * 20000 + "]" * 20000
    assert agree(text) == (text, None)


def test_moderately_nested_arguments_still_a_call() -> None:
    text = '{"name": "search_docs", "arguments": {"query": ' + "[" * 300 + "]" * 300 + "}}"
    _, finding = agree(text)
    assert finding is not None and finding.tool_name == "search_docs"


def test_very_deeply_nested_arguments_do_not_crash() -> None:
    # Beyond the JSON decoder's recursion limit: only "no crash, both paths agree" is required.
    text = '{"name": "search_docs", "arguments": {"query": ' + "[" * 50000 + "]" * 50000 + "}}"
    agree(text)


def test_large_number_in_arguments_is_a_call() -> None:
    text = '{"name": "search_docs", "arguments": {"limit": ' + "9" * 400 + "}}"
    _, finding = agree(text)
    assert finding is not None and finding.tool_name == "search_docs"


def test_overflowing_float_in_arguments_is_a_call() -> None:
    text = '{"name": "search_docs", "arguments": {"limit": 1e99999}}'
    _, finding = agree(text)
    assert finding is not None and finding.tool_name == "search_docs"


def test_huge_integer_does_not_crash() -> None:
    # 50 000 digits exceed Python's int-from-string limit; the verdict must still be settled
    # without an exception and agree between the paths.
    text = '{"name": "search_docs", "arguments": {"limit": ' + "9" * 50000 + "}}"
    agree(text)


def test_huge_integer_outside_a_call_is_published() -> None:
    text = '{"total": ' + "9" * 50000 + "}"
    assert agree(text) == (text, None)


def test_unclosed_string_is_published_at_finish() -> None:
    text = '{"name": "search_docs", "arguments": {"query": "never closed'
    assert agree(text) == (text, None)


# ---------------------------------------------------------------------------------------------
# The probe: a generous superset, rejecting early.


def probe_alive(text: str) -> bool:
    probe = BlobProbe(TOOLS, limit=1 << 20)
    probe.feed(text)
    return probe.alive


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "  \n",
        "{",
        '{"na',
        '{"name": "get_w',
        '{"name": "get_weather", "arguments": {"city": "Po',
        "```",
        "```json\n",
        "```json\n[",
        "[",
        "[get_wea",
        "[get_weather(city='Po",
        '{"tool_calls": [{"id": "c", "type": "function", "function": {"name": "get',
        '{"type": "run_in_terminal", "command": "ls"',
        '{"name": "get_weather", "arguments": {}}; ',
    ],
)
def test_probe_keeps_viable_prefixes(prefix: str) -> None:
    assert probe_alive(prefix) is True


@pytest.mark.parametrize(
    "prefix",
    [
        "H",
        "The answer",
        '{"answer"',
        '{"tool": "book_flight"',
        '{"name": "get_weather", "extra"',
        '{"type": "object"',
        "[1",
        "[book",
        "[get_weather]",
        "``x",
        '{"name": "get_weather", "arguments": {}} and',
        '```json\n{"name": "get_weather", "arguments": {}}\n```\nok',
    ],
)
def test_probe_rejects_early(prefix: str) -> None:
    assert probe_alive(prefix) is False


def test_probe_is_dead_without_declared_names() -> None:
    probe = BlobProbe(NO_TOOLS, limit=1 << 20)
    assert probe.alive is False


def test_probe_dies_past_its_limit() -> None:
    probe = BlobProbe(TOOLS, limit=10)
    probe.feed('{"name": ')
    assert probe.alive is True
    probe.feed('"get')
    assert probe.alive is False
