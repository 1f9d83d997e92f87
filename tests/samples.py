"""Sample model turns shared by the observability tests."""

from __future__ import annotations

from spillguard.scripted import Turn, call

HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
DSML = (
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Lisbon</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)
HONEST = Turn(content="It is sunny in Lisbon, 21 °C.")
REAL = Turn(tool_calls=[call("get_weather", {"city": "Lisbon"})])
