"""`spillguard config check PATH`, `spillguard config show`, and `serve` refusing a bad file."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from spillguard.cli import main

SECRETS = ("xai-secret-value", "admin-secret-value", "plain-proxy-key", "injected-default")
FILE = """
upstream = "deepseek"
mode = "retry"
proxy_keys = ["plain-proxy-key"]

[upstreams.grok]
url = "xai"
api_key_env = "SG_TEST_XAI_KEY"

[[rules]]
model = "grok-*"
mode = "fail"

[[rules]]
model = "deepseek-reasoner"
upstream = "default"
hold_limit = 65536
"""


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SPILLGUARD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SG_TEST_XAI_KEY", "xai-secret-value")
    monkeypatch.setenv("SPILLGUARD_UPSTREAM_KEY", "injected-default")


def config_file(tmp_path: Path, text: str = FILE) -> str:
    path = tmp_path / "spillguard.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_check_prints_the_resolved_settings_without_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path)
    assert main(["config", "check", path]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for secret in SECRETS:
        assert secret not in out
    lines = out.splitlines()
    assert f'upstream = "https://api.deepseek.com/v1"  # {path}' in lines
    assert 'upstream_key = "***"  # SPILLGUARD_UPSTREAM_KEY' in lines
    assert f'proxy_keys = ["***"]  # {path}' in lines
    assert "port = 8080  # default" in lines
    assert f"[upstreams.grok]  # served at /grok/v1 ({path})" in lines
    assert 'api_key_env = "SG_TEST_XAI_KEY"  # set: ***' in lines
    summary = out[out.index("# The policy a request is held to") :].splitlines()
    assert summary == [
        "# The policy a request is held to (the first matching rule, else the options):",
        "#   1. model grok-* on any upstream: mode fail, hold_limit 262144",
        "#   2. model deepseek-reasoner on default: mode retry, hold_limit 65536",
        "#   otherwise: mode retry, hold_limit 262144",
        "# x-spillguard-mode may ask for a mode at least as strict (observe < retry = repair "
        "< fail).",
    ]


def test_what_check_prints_is_toml_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "check", config_file(tmp_path)]) == 0
    printed = tomllib.loads(capsys.readouterr().out)
    assert printed["upstreams"]["grok"]["url"] == "https://api.x.ai/v1"
    assert [r["model"] for r in printed["rules"]] == ["grok-*", "deepseek-reasoner"]
    assert printed["hold_limit"] == 262144 and printed["otel_traces"] is False


def test_check_a_bad_file_says_why_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, '[[rules]]\nmodel = "grok-*"\nmode = "fial"\n')
    assert main(["config", "check", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "spillguard: rules #1: mode: Input should be 'retry', 'fail', 'observe' or 'repair' "
        f"({path})\n"
    )


def test_check_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["config", "check"])
    assert done.value.code == 2
    assert "check needs the file" in capsys.readouterr().err


def test_show_reads_the_same_sources_as_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPILLGUARD_CONFIG", config_file(tmp_path))
    monkeypatch.setenv("SPILLGUARD_MODE", "observe")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert 'mode = "observe"  # SPILLGUARD_MODE' in out.splitlines()
    assert "#   otherwise: mode observe, hold_limit 262144" in out
    (tmp_path / "other").mkdir()
    other = config_file(tmp_path / "other", 'mode = "fail"\n')
    monkeypatch.delenv("SPILLGUARD_MODE")
    assert main(["config", "show", "--config", other]) == 0
    assert f'mode = "fail"  # {other}' in capsys.readouterr().out.splitlines()


def test_show_without_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "# config file" not in out and 'mode = "retry"  # default' in out


def test_serve_refuses_a_bad_file_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, 'mode = "retry"\nholdlimit = 4096\n')
    assert main(["--config", path, "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"spillguard: {path}: holdlimit: not an option (did you mean hold_limit?)\n"
    )


def test_serve_names_a_missing_key_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SG_TEST_XAI_KEY")
    assert main(["--config", config_file(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "spillguard: upstreams.grok: api_key_env: the environment variable SG_TEST_XAI_KEY is "
        f"not set ({tmp_path / 'spillguard.toml'})\n"
    )


def test_incidents_read_the_database_the_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "from-file.sqlite3"
    monkeypatch.setenv("SPILLGUARD_CONFIG", config_file(tmp_path, f"incidents_db = {str(db)!r}\n"))
    assert main(["incidents", "stats"]) == 1  # the file's database, which does not exist yet
    assert capsys.readouterr().err == f"spillguard: no incident database at {db}\n"
    monkeypatch.setenv("SPILLGUARD_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(SystemExit) as done:
        main(["incidents"])
    assert done.value.code == f"spillguard: {tmp_path / 'missing.toml'}: no such file"


def test_no_password_in_a_url_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://sg:db-password-123@db.example:5432/sg?sslmode=require"
    monkeypatch.setenv("SPILLGUARD_INCIDENTS_DB", url)
    monkeypatch.setenv("SPILLGUARD_UPSTREAM", "https://me:up-password-1@llm.example/v1")
    text = '[upstreams.x]\nurl = "http://u:up-password-2@h/v1"\nanthropic = "http://u:up-password-3@h"\n'
    assert main(["config", "check", config_file(tmp_path, text)]) == 0
    out = capsys.readouterr().out
    for password in ("db-password-123", "up-password-1", "up-password-2", "up-password-3"):
        assert password not in out
    assert 'upstream = "https://me:***@llm.example/v1"  # SPILLGUARD_UPSTREAM' in out
    assert 'url = "http://u:***@h/v1"' in out and 'anthropic = "http://u:***@h"' in out
    assert (
        'incidents_db = "postgresql://sg@db.example:5432/sg"  # SPILLGUARD_INCIDENTS_DB '
        "(password hidden)" in out.splitlines()
    )
