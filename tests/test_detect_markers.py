"""Control markup written as text: every family of the reference, its spelling drift, and the
"left alone" rules of issue 2 (line start only, outside fences and quotes, no HTML, links, bare
names or Python-call prose).

Every example is written for spillguard. A positive example asserts the family, the tool name and
the offset where the markup's line starts; a negative one asserts that nothing is found and that
the whole text is published unchanged.
"""

from __future__ import annotations

import pytest

from spillguard.detect import NO_TOOLS, Scanner, declared_tools, inspect_text

# ---------------------------------------------------------------------------------------------
# The request every example answers: four function tools, one with a name that has spaces.


def _fn(name: str, *params: str) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params}},
        },
    }


REQUEST = {
    "model": "some-model",
    "messages": [{"role": "user", "content": "What is the weather in Porto?"}],
    "tools": [
        _fn("get_weather", "city", "unit"),
        _fn("search_docs", "query"),
        _fn("run_in_terminal", "command"),
        _fn("get current temperature", "location"),
        _fn("route_to", "target"),
    ],
}
TOOLS = declared_tools(REQUEST)


def whole(text: str, tools=TOOLS) -> tuple[str, object]:
    """Published text and finding of the whole-reply path (one feed, then finish)."""
    scanner = Scanner(tools)
    published = scanner.feed(text) + scanner.finish()
    return published, scanner.finding


def verdict(text: str, tools=TOOLS) -> tuple[str, str | None, int] | None:
    finding = inspect_text(text, tools)
    if finding is None:
        return None
    return finding.family, finding.tool_name, finding.start


def test_request_declares_the_example_tools() -> None:
    assert TOOLS.declared is True
    assert TOOLS.names == {
        "get_weather",
        "search_docs",
        "run_in_terminal",
        "get current temperature",
        "route_to",
    }


# ---------------------------------------------------------------------------------------------
# Every family of the reference table, markup at the very start of the reply.

FB = "｜"  # U+FF5C FULLWIDTH VERTICAL LINE
LB = "▁"  # U+2581 LOWER ONE EIGHTH BLOCK


def ds(token: str) -> str:
    """A DeepSeek native token such as ds("tool calls begin") -> <｜tool▁calls▁begin｜>."""
    return "<" + FB + token.replace(" ", LB) + FB + ">"


def dsml(tag: str, closing: bool = False) -> str:
    return ("</" if closing else "<") + FB + "DSML" + FB + tag


FAMILIES = [
    pytest.param(
        ds("tool calls begin")
        + ds("tool call begin")
        + "function"
        + ds("tool sep")
        + "get_weather\n```json\n"
        + '{"city": "Porto", "unit": "celsius"}\n```'
        + ds("tool call end")
        + ds("tool calls end"),
        "deepseek",
        "get_weather",
        id="deepseek-v3-fenced-json",
    ),
    pytest.param(
        ds("tool calls begin")
        + ds("tool call begin")
        + "search_docs"
        + ds("tool sep")
        + '{"query": "refund window for annual plans"}'
        + ds("tool call end")
        + ds("tool calls end"),
        "deepseek",
        "search_docs",
        id="deepseek-v3.1-name-then-sep",
    ),
    pytest.param(
        ds("tool call begin")
        + "function"
        + ds("tool sep")
        + 'run_in_terminal\n```json\n{"command": "make test"}\n```'
        + ds("tool call end"),
        "deepseek",
        "run_in_terminal",
        id="deepseek-inner-opener-only",
    ),
    pytest.param(
        dsml("function_calls>")
        + "\n"
        + dsml('invoke name="search_docs">')
        + "\n"
        + dsml('parameter name="query" string="true">')
        + "password reset"
        + dsml("parameter>", closing=True)
        + "\n"
        + dsml("invoke>", closing=True)
        + "\n"
        + dsml("function_calls>", closing=True),
        "dsml",
        "search_docs",
        id="dsml-v3.2-function_calls",
    ),
    pytest.param(
        dsml("tool_calls>")
        + "\n"
        + dsml('invoke name="get_weather">')
        + "\n"
        + dsml('parameter name="city" string="true">')
        + "Reykjavik"
        + dsml("parameter>", closing=True)
        + "\n"
        + dsml("invoke>", closing=True)
        + "\n"
        + dsml("tool_calls>", closing=True),
        "dsml",
        "get_weather",
        id="dsml-v4-tool_calls",
    ),
    pytest.param(
        dsml('invoke name="run_in_terminal">')
        + "\n"
        + dsml('parameter name="command" string="true">')
        + "git log -3"
        + dsml("parameter>", closing=True)
        + "\n"
        + dsml("invoke>", closing=True),
        "dsml",
        "run_in_terminal",
        id="dsml-orphan-invoke",
    ),
    pytest.param(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>',
        "hermes",
        "get_weather",
        id="hermes-json",
    ),
    pytest.param(
        "<tool_call>\n<function=search_docs>\n<parameter=query>\nsso setup\n</parameter>\n"
        "</function>\n</tool_call>",
        "qwen3_coder",
        "search_docs",
        id="qwen3-coder-wrapped",
    ),
    pytest.param(
        "<function=run_in_terminal>\n<parameter=command>\nls -la\n</parameter>\n</function>",
        "qwen3_coder",
        "run_in_terminal",
        id="qwen3-coder-no-wrapper",
    ),
    pytest.param(
        '<tool_call>\n<function="get current temperature">\n<parameter=location>\nOslo\n'
        "</parameter>\n</function>\n</tool_call>",
        "qwen3_coder",
        "get current temperature",
        id="qwen3-coder-quoted-name-wrapped",
    ),
    pytest.param(
        '<function="get current temperature">\n<parameter=location>\nQuito\n</parameter>\n'
        "</function>",
        "qwen3_coder",
        "get current temperature",
        id="qwen3-coder-quoted-name-no-wrapper",
    ),
    pytest.param(
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lisbon</arg_value>\n"
        "</tool_call>",
        "glm",
        "get_weather",
        id="glm-newline",
    ),
    pytest.param(
        "<tool_call>search_docs<arg_key>query</arg_key><arg_value>quota</arg_value></tool_call>",
        "glm",
        "search_docs",
        id="glm-inline",
    ),
    pytest.param(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Cairo"}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
        "kimi",
        "get_weather",
        id="kimi-plural-section",
    ),
    pytest.param(
        "<|tool_call_section_begin|><|tool_call_begin|>functions.search_docs:3"
        '<|tool_call_argument_begin|>{"query": "sla"}<|tool_call_end|>'
        "<|tool_call_section_end|>",
        "kimi",
        "search_docs",
        id="kimi-singular-section",
    ),
    pytest.param(
        "<|tool_call_begin|>functions.run_in_terminal:0<|tool_call_argument_begin|>"
        '{"command": "pwd"}<|tool_call_end|>',
        "kimi",
        "run_in_terminal",
        id="kimi-inner-opener-only",
    ),
    pytest.param(
        '[TOOL_CALLS][{"name": "search_docs", "arguments": {"query": "billing"}}]',
        "mistral",
        "search_docs",
        id="mistral-old-array",
    ),
    pytest.param(
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Nairobi"}',
        "mistral",
        "get_weather",
        id="mistral-v11",
    ),
    pytest.param(
        '[TOOL_CALLS]run_in_terminal[CALL_ID]a1B2c3D4e[ARGS]{"command": "uptime"}',
        "mistral",
        "run_in_terminal",
        id="mistral-v11-call-id",
    ),
    pytest.param(
        '<|python_tag|>{"name": "search_docs", "parameters": {"query": "webhooks"}}',
        "llama",
        "search_docs",
        id="llama-python-tag",
    ),
    pytest.param(
        "<|python_start|>[get_weather(city='Hanoi')]<|python_end|>",
        "pythonic",
        "get_weather",
        id="llama4-python-start",
    ),
    pytest.param(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Lima"}<|call|>',
        "harmony",
        "get_weather",
        id="harmony-channel-then-recipient",
    ),
    pytest.param(
        "<|start|>assistant to=functions.search_docs<|channel|>commentary json<|message|>"
        '{"query": "export csv"}<|call|>',
        "harmony",
        "search_docs",
        id="harmony-recipient-then-channel",
    ),
    pytest.param(
        "<|start|>assistant<|channel|>commentary to=functions.run_in_terminal "
        '<|constrain|>json<|message|>{"command": "df -h"}<|call|>',
        "harmony",
        "run_in_terminal",
        id="harmony-start-assistant",
    ),
    pytest.param(
        '<xai:function_call name="run_in_terminal">\n'
        '<parameter name="command">git branch -a</parameter>\n</xai:function_call>',
        "xai",
        "run_in_terminal",
        id="xai",
    ),
    pytest.param(
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Perth"}}]',
        "granite",
        "get_weather",
        id="granite",
    ),
    pytest.param(
        'functools[{"name": "search_docs", "arguments": {"query": "rate limits"}}]',
        "functools",
        "search_docs",
        id="functools",
    ),
    pytest.param(
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Dakar'
        "</parameter>\n</invoke>\n</minimax:tool_call>",
        "minimax",
        "get_weather",
        id="minimax",
    ),
    pytest.param(
        '<tool_calls>[{"name": "search_docs", "arguments": {"query": "sso"}}]</tool_calls>',
        "tool_calls_tag",
        "search_docs",
        id="tool_calls-tag",
    ),
    pytest.param(
        '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Bern"}}'
        "<|action_end|>",
        "internlm",
        "get_weather",
        id="internlm",
    ),
    pytest.param(
        "<seed:tool_call>\n<function=run_in_terminal>\n<parameter=command>whoami</parameter>\n"
        "</function>\n</seed:tool_call>",
        "seed",
        "run_in_terminal",
        id="seed",
    ),
    pytest.param(
        '<longcat_tool_call>{"name": "search_docs", "arguments": {"query": "mfa"}}'
        "</longcat_tool_call>",
        "longcat",
        "search_docs",
        id="longcat",
    ),
    pytest.param(
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Kyiv"}}]</TOOLCALL>',
        "nemotron",
        "get_weather",
        id="nemotron",
    ),
    pytest.param(
        '<|START_ACTION|>[{"tool_name": "search_docs", "parameters": {"query": "audit"}}]'
        "<|END_ACTION|>",
        "command_r",
        "search_docs",
        id="command-r7b",
    ),
]


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_at_reply_start(markup: str, family: str, name: str) -> None:
    assert verdict(markup) == (family, name, 0)


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_after_prose_starts_at_marker_line(markup: str, family: str, name: str) -> None:
    prose = "Let me look that up for you.\n\n"
    assert verdict(prose + markup) == (family, name, len(prose))


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_indented_up_to_three_spaces_starts_at_line_start(
    markup: str, family: str, name: str
) -> None:
    prose = "One moment.\n"
    assert verdict(prose + "   " + markup) == (family, name, len(prose))


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_inside_backtick_fence_is_left_alone(markup: str, family: str, name: str) -> None:
    text = f"Here is what that format looks like:\n\n```text\n{markup}\n```\n\nThat is all."
    assert whole(text) == (text, None)


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_inside_tilde_fence_is_left_alone(markup: str, family: str, name: str) -> None:
    text = f"An example:\n~~~\n{markup}\n~~~\n"
    assert whole(text) == (text, None)


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_in_quote_is_left_alone(markup: str, family: str, name: str) -> None:
    quoted = "\n".join("> " + line for line in markup.split("\n"))
    text = "The model replied:\n\n" + quoted + "\n\nwhich is a leaked call."
    assert whole(text) == (text, None)


# Generic tags whose first line carries no declared call body: mid-sentence they are prose.
MID_LINE_PROSE = {
    "hermes-json",
    "qwen3-coder-wrapped",
    "qwen3-coder-quoted-name-wrapped",
    "glm-newline",
}


@pytest.mark.parametrize(
    ("markup", "family", "name"), [p for p in FAMILIES if p.id not in MID_LINE_PROSE]
)
def test_family_glued_mid_sentence_counts_from_its_marker(
    markup: str, family: str, name: str
) -> None:
    """Distinctive tokens count anywhere in a line; generic tags count mid-line when a call body
    naming a declared tool follows. The prose before the marker stays published."""
    first_line = markup.split("\n", 1)[0]
    prose = "When the parser is off, the model writes"
    text = f"{prose} {first_line} as plain text."
    found = inspect_text(text, TOOLS)
    assert found is not None
    assert (found.family, found.start) == (family, len(prose) + 1)
    assert whole(text)[0] == text[: len(prose) + 1]


@pytest.mark.parametrize(
    ("markup", "family", "name"), [p for p in FAMILIES if p.id in MID_LINE_PROSE]
)
def test_generic_tag_mid_sentence_without_a_declared_body_is_prose(
    markup: str, family: str, name: str
) -> None:
    first_line = markup.split("\n", 1)[0]
    text = f"When the parser is off, the model writes {first_line} as plain text."
    assert whole(text) == (text, None)


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_in_inline_code_is_left_alone(markup: str, family: str, name: str) -> None:
    first_line = markup.split("\n", 1)[0]
    text = f"`{first_line}` opens the call."
    assert whole(text) == (text, None)


@pytest.mark.parametrize(("markup", "family", "name"), FAMILIES)
def test_family_indented_four_spaces_is_left_alone(markup: str, family: str, name: str) -> None:
    block = "\n".join("    " + line for line in markup.split("\n"))
    text = "The raw output was:\n\n" + block + "\n"
    assert whole(text) == (text, None)


def test_undeclared_name_in_markup_still_counts_and_is_reported() -> None:
    text = '<tool_call>\n{"name": "wipe_database", "arguments": {}}\n</tool_call>'
    assert verdict(text) == ("hermes", "wipe_database", 0)
    text = '[TOOL_CALLS]book_flight[ARGS]{"to": "SFO"}'
    assert verdict(text) == ("mistral", "book_flight", 0)


def test_bare_opener_counts_without_a_readable_name() -> None:
    assert verdict("<tool_call>") == ("hermes", None, 0)
    assert verdict("Checking.\n<|tool_calls_section_begin|>") == ("kimi", None, 10)


def test_markup_after_a_closed_fence_counts() -> None:
    prefix = "Example:\n```\n<tool_call>\n```\n"
    text = prefix + '<tool_call>\n{"name": "search_docs", "arguments": {}}\n</tool_call>'
    assert verdict(text) == ("hermes", "search_docs", len(prefix))


def test_markup_after_a_quote_counts() -> None:
    prefix = "> <tool_call> is the opener\n"
    text = prefix + '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}'
    assert verdict(text) == ("hermes", "get_weather", len(prefix))


def test_crlf_line_endings() -> None:
    prefix = "Looking it up.\r\n"
    text = prefix + '[TOOL_CALLS]search_docs[ARGS]{"query": "x"}\r\n'
    assert verdict(text) == ("mistral", "search_docs", len(prefix))


# ---------------------------------------------------------------------------------------------
# Spelling drift.

DRIFT = [
    pytest.param(
        '<|DSML|function_calls>\n<|DSML|invoke name="search_docs">\n</|DSML|invoke>\n'
        "</|DSML|function_calls>",
        "dsml",
        "search_docs",
        id="dsml-ascii-bars",
    ),
    pytest.param(
        '<|DSML|invoke name="get_weather">\n<|DSML|parameter name="city" string="true">Oslo'
        "</|DSML|parameter>\n</|DSML|invoke>",
        "dsml",
        "get_weather",
        id="dsml-ascii-bars-orphan-invoke",
    ),
    pytest.param(
        '<｜｜DSML｜｜tool_calls>\n<｜｜DSML｜｜invoke name="run_in_terminal">\n'
        "</｜｜DSML｜｜invoke>\n</｜｜DSML｜｜tool_calls>",
        "dsml",
        "run_in_terminal",
        id="dsml-doubled-fullwidth-bars",
    ),
    pytest.param(
        '<||DSML||tool_calls>\n<||DSML||invoke name="get_weather">\n</||DSML||invoke>',
        "dsml",
        "get_weather",
        id="dsml-doubled-ascii-bars",
    ),
    pytest.param(
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>get_weather\n"
        '```json\n{"city": "Graz"}\n```<｜tool_call_end｜><｜tool_calls_end｜>',
        "deepseek",
        "get_weather",
        id="deepseek-underscore-for-block",
    ),
    pytest.param(
        "<｜tool calls begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search_docs\n"
        '```json\n{"query": "x"}\n```',
        "deepseek",
        "search_docs",
        id="deepseek-space-for-block-in-opener",
    ),
    pytest.param(
        "<｜tool\\_calls\\_begin｜><｜tool\\_call\\_begin｜>function<｜tool\\_sep｜>"
        'run\\_in\\_terminal\n```json\n{"command": "ls"}\n```',
        "deepseek",
        "run_in_terminal",
        id="deepseek-markdown-escaped-underscores",
    ),
    pytest.param(
        "<|tool_calls_begin|><|tool_call_begin|>function<|tool_sep|>get_weather\n"
        '```json\n{"city": "Turin"}\n```<|tool_call_end|><|tool_calls_end|>',
        "deepseek",
        "get_weather",
        id="deepseek-ascii-bars",
    ),
    pytest.param(
        "<｜｜tool▁calls▁begin｜｜><｜｜tool▁call▁begin｜｜>search_docs<｜｜tool▁sep｜｜>"
        '{"query": "y"}',
        "deepseek",
        "search_docs",
        id="deepseek-doubled-bars",
    ),
    pytest.param(
        "<|tool\\_calls\\_section\\_begin|><|tool\\_call\\_begin|>functions.get\\_weather:0"
        '<|tool\\_call\\_argument\\_begin|>{"city": "Pune"}<|tool\\_call\\_end|>',
        "kimi",
        "get_weather",
        id="kimi-markdown-escaped-underscores",
    ),
    pytest.param(
        "\\[TOOL\\_CALLS\\]search\\_docs\\[ARGS\\]{}",
        "mistral",
        "search_docs",
        id="mistral-markdown-escaped",
    ),
]


@pytest.mark.parametrize(("markup", "family", "name"), DRIFT)
def test_spelling_drift(markup: str, family: str, name: str) -> None:
    assert verdict(markup) == (family, name, 0)
    prose = "Sure, checking.\n"
    assert verdict(prose + markup) == (family, name, len(prose))


@pytest.mark.parametrize(("markup", "family", "name"), DRIFT)
def test_spelling_drift_inside_fence_is_left_alone(markup: str, family: str, name: str) -> None:
    text = "```\n" + markup + "\n```"
    assert whole(text) == (text, None)


def test_deepseek_space_drift_throughout_still_reports_name() -> None:
    text = (
        "<｜tool calls begin｜><｜tool call begin｜>function<｜tool sep｜>get_weather\n"
        '```json\n{"city": "Oslo"}\n```<｜tool call end｜><｜tool calls end｜>'
    )
    assert verdict(text) == ("deepseek", "get_weather", 0)


def test_deepseek_space_drift_throughout_is_still_found() -> None:
    text = "<｜tool calls begin｜><｜tool call begin｜>function<｜tool sep｜>get_weather"
    finding = inspect_text(text, TOOLS)
    assert finding is not None
    assert (finding.family, finding.start) == ("deepseek", 0)


# ---------------------------------------------------------------------------------------------
# What is left alone.

LEFT_ALONE = [
    pytest.param(
        "To call a tool, Hermes models write:\n\n```\n<tool_call>\n"
        '{"name": "search_docs", "arguments": {"query": "x"}}\n</tool_call>\n```\n\n'
        "Your server's parser turns that into a structured call.",
        id="backtick-fence",
    ),
    pytest.param(
        '```xml\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n```',
        id="backtick-fence-with-info",
    ),
    pytest.param(
        "~~~\n[TOOL_CALLS]get_weather[ARGS]{}\n~~~\nand the closing line.",
        id="tilde-fence",
    ),
    pytest.param(
        "````md\n```\n<tool_call>\n```\n<tool_call>\n````\n",
        id="longer-fence-holds-shorter-inner-fence",
    ),
    pytest.param(
        "~~~~\n<tool_call>\n~~~\n<function=get_weather>\n~~~~",
        id="tilde-fence-needs-same-length-to-close",
    ),
    pytest.param(
        "   ```\n<|python_tag|>{}\n   ```",
        id="fence-indented-three-spaces",
    ),
    pytest.param(
        "An unclosed block runs to the end:\n```\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {}}',
        id="unclosed-fence",
    ),
    pytest.param("> <｜DSML｜tool_calls>\n> is what DeepSeek emits", id="quote"),
    pytest.param(">> [TOOL_CALLS]search_docs[ARGS]{}", id="nested-quote"),
    pytest.param(">   <tool_call>", id="quote-with-indent"),
    pytest.param(
        "Models without a parser print <tool_call> followed by JSON.",
        id="mid-sentence",
    ),
    pytest.param("Wrap it in `<tool_call>` and `</tool_call>`.", id="inline-code"),
    pytest.param("`[TOOL_CALLS]` starts a Mistral call.", id="inline-code-at-line-start"),
    pytest.param(
        'Raw output:\n\n    <tool_call>\n    {"name": "search_docs"}\n    </tool_call>\n',
        id="indented-code-block",
    ),
    pytest.param("\t<tool_call>", id="tab-indented"),
    pytest.param('<div class="callout">Remember to save.</div>', id="html-div"),
    pytest.param("<table>\n<tr><td>3</td></tr>\n</table>", id="html-table"),
    pytest.param("<details>\n<summary>More</summary>\n</details>", id="html-details"),
    pytest.param("<toolbox>hammer</toolbox>", id="html-near-miss-tool"),
    pytest.param("<tool-call>not the opener</tool-call>", id="hyphenated-tag"),
    pytest.param("<function>f</function>", id="function-tag-without-equals"),
    pytest.param("<|im_end|>", id="chatml-end-token"),
    pytest.param("[search_docs](https://docs.example.com/search)", id="markdown-link-tool"),
    pytest.param("[Tool calls](https://example.com/tool-calls)", id="markdown-link-tool-calls"),
    pytest.param("[1]: https://example.com/footnote", id="link-reference"),
    pytest.param("route_to", id="bare-tool-name"),
    pytest.param("search_docs\n", id="bare-tool-name-newline"),
    pytest.param("get current temperature", id="bare-tool-name-with-spaces"),
    pytest.param(
        "get_weather(city='Porto') is how you would ask for Porto's forecast.",
        id="python-call-prose",
    ),
    pytest.param("get_weather(city='Porto')", id="python-call-without-list"),
    pytest.param(
        "[get_weather(city='Porto')] is the pythonic form.", id="pythonic-list-then-prose"
    ),
    pytest.param("functools.partial(int, base=2)", id="functools-attribute"),
    pytest.param("functools is part of the standard library.", id="functools-word"),
    pytest.param("[TOOL_CALLS is the Mistral token", id="mistral-token-unclosed"),
    pytest.param("[TOOL_CALL]x", id="mistral-singular-typo"),
    pytest.param("<TOOL_CALL>", id="uppercase-hermes"),
    pytest.param("<tool_call >", id="hermes-with-space"),
    pytest.param("<tool", id="marker-prefix-at-end"),
    pytest.param("Results:\n<tool_call", id="marker-prefix-unfinished"),
    pytest.param("", id="empty"),
    pytest.param("\n\n", id="blank-lines"),
]


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_left_alone(text: str) -> None:
    assert inspect_text(text, TOOLS) is None
    assert whole(text) == (text, None)


def test_fence_opened_on_list_item_line_is_left_alone() -> None:
    text = (
        "Steps:\n"
        "1. ```xml\n"
        "   <tool_call>\n"
        '   {"name": "search_docs", "arguments": {}}\n'
        "   </tool_call>\n"
        "   ```\n"
        "2. Send it.\n"
    )
    assert inspect_text(text, TOOLS) is None


def test_list_item_with_fence_on_its_own_line_is_left_alone() -> None:
    text = "1. Wrap it:\n   ```\n   <tool_call>\n   ```\n2. Done.\n"
    assert whole(text) == (text, None)


# ---------------------------------------------------------------------------------------------
# Requests without tools.


def test_request_without_tools_is_not_inspected() -> None:
    """A request with no tools gets NO_TOOLS, whose `declared` is False: that is the signal on
    which the proxy skips inspection entirely. The scanner itself does not gate on it: markup is
    control text whatever was declared, so fed directly it still reports markup; but with no
    declared names it can never report a JSON blob."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    tools = declared_tools(body)
    assert tools is NO_TOOLS
    assert tools.declared is False
    assert tools.names == frozenset()

    blob = '{"name": "get_weather", "arguments": {"city": "Porto"}}'
    assert whole(blob, tools) == (blob, None)
    # Documented: the core reports markup for any ToolSet; never calling it is the proxy's job.
    assert verdict("<tool_call>\n{}\n</tool_call>", tools) == ("hermes", None, 0)


def test_request_with_only_builtin_tools_still_detects_markup_not_blobs() -> None:
    tools = declared_tools({"tools": [{"type": "web_search_preview"}]})
    assert tools.declared is True
    assert tools.names == frozenset()
    assert verdict('[TOOL_CALLS]web_search[ARGS]{"q": "x"}', tools) == (
        "mistral",
        "web_search",
        0,
    )
    blob = '{"name": "web_search", "arguments": {}}'
    assert whole(blob, tools) == (blob, None)
