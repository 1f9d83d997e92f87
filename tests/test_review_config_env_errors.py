"""Review: a table option given by a variable (`SPILLGUARD_RULES`, `SPILLGUARD_UPSTREAMS`) that
is not JSON makes `spillguard config show` (and `serve`) end in a traceback
(pydantic_settings.SettingsError escapes `cli.load`), where every other bad value is one line
naming the key and the reason. Fixed: `config.Environment` turns it into a `ConfigError`
naming the variable (`SPILLGUARD_RULES: not JSON: ...`)."""

from __future__ import annotations

import os

import pytest

from spillguard.cli import main


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SPILLGUARD_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize("variable", ["SPILLGUARD_RULES", "SPILLGUARD_UPSTREAMS"])
def test_a_table_variable_that_is_not_json_is_a_clear_error(
    variable: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(variable, '[{"model": "grok-*"')
    code = main(["config", "show"])  # raising here is the defect
    assert code != 0
    err = capsys.readouterr().err
    assert variable in err or variable.removeprefix("SPILLGUARD_").lower() in err
