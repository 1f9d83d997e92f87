"""A scripted Anthropic-compatible upstream and spillguard in front of it, on loopback, for the
Messages end-to-end tests (the Python SDK and the Node SDK), and the leaks those providers write."""

from __future__ import annotations

from typing import Any

from spillguard.runner import Running, start_background
from spillguard.scripted import Raw, ScriptedUpstream
from spillguard.scripted_anthropic import Message, anthropic_upstream, text, tool_use
from spillguard.settings import Settings

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    },
]

# The leaks, one per family seen behind Anthropic-compatible endpoints.
DSML = (
    "<｜DSML｜function_calls>\n"
    '<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Lisbon"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Lisbon"}<|tool_call_end|><|tool_calls_section_end|>'
)
MINIMAX = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Lisbon</parameter>'
    "\n</invoke>\n</minimax:tool_call>"
)
CLAUDE = (
    'count\n<invoke name="Read">\n<parameter name="file_path">/etc/hosts</parameter>\n</invoke>'
)
GLM = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lisbon</arg_value>\n</tool_call>"
FAMILIES = {
    "dsml": DSML,
    "deepseek": DEEPSEEK,
    "kimi": KIMI,
    "minimax": MINIMAX,
    "claude_xml": CLAUDE,
    "glm": GLM,
}
CALL = Message([tool_use("get_weather", {"city": "Lisbon"})])
HONEST = Message([text("It is sunny in Lisbon today, around 21 °C.")])


class AnthropicStack:
    """Scripted turns answered in order (the last repeats), spillguard in front. A request whose
    `model` names one of `cases` plays that case's turns instead, counting its own requests."""

    def __init__(self, *turns: Message | Raw) -> None:
        self.turns = list(turns)
        self.cases: dict[str, list[Message | Raw]] = {}
        self.upstream: ScriptedUpstream = anthropic_upstream(self._next)
        self.proxy: Running | None = None

    def _next(self, record: dict[str, Any]) -> Message | Raw:
        model = (record.get("body") or {}).get("model")
        turns = self.cases.get(model, self.turns) if isinstance(model, str) else self.turns
        index = len(self.requests_for(model if turns is not self.turns else None)) - 1
        return turns[min(index, len(turns) - 1)]

    def requests_for(self, model: str | None) -> list[dict[str, Any]]:
        """The message requests of one case (every one, for None)."""
        return [
            r
            for r in self.message_requests
            if model is None or (r.get("body") or {}).get("model") == model
        ]

    async def start(self, **settings: Any) -> AnthropicStack:
        await self.upstream.start()
        origin = self.upstream.url.removesuffix("/v1")
        base = {"upstream": self.upstream.url + "/openai", "anthropic_upstream": origin}
        base |= {"port": 0, "log_level": "WARNING", "incidents_db": ""}
        self.proxy = await start_background(Settings(**(base | settings)))
        return self

    @property
    def base_url(self) -> str:
        """spillguard's base URL as the Anthropic SDK takes it (without /v1)."""
        assert self.proxy is not None
        return self.proxy.url.removesuffix("/v1")

    @property
    def message_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.upstream.requests if r["path"].split("?")[0] == "/v1/messages"]

    @property
    def calls(self) -> int:
        return len(self.message_requests)

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
        await self.upstream.stop()
