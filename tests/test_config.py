"""The config file: precedence (flag > environment > file > default), what it may hold, and every
message a bad one fails with, naming the key and the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from spillguard.config import ConfigError, Origins, explain
from spillguard.runner import settings_env
from spillguard.settings import Mode, ModeHeader, Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SPILLGUARD_"):
            monkeypatch.delenv(key)


def write(tmp_path: Path, text: str, name: str = "spillguard.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---- precedence --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "env", "file", "expected"),
    [
        (5000, 6000, 7000, 5000),  # the flag wins over everything
        (None, 6000, 7000, 6000),  # then the environment
        (None, None, 7000, 7000),  # then the file
        (None, None, None, 256 * 1024),  # then the default
        (5000, None, 7000, 5000),
        (5000, 6000, None, 5000),
    ],
)
def test_precedence_is_flag_env_file_default(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: int | None,
    env: int | None,
    file: int | None,
    expected: int,
) -> None:
    path = write(tmp_path, f"hold_limit = {file}\n" if file is not None else "")
    if env is not None:
        monkeypatch.setenv("SPILLGUARD_HOLD_LIMIT", str(env))
    flags: dict[str, Any] = {"config": path} | ({"hold_limit": flag} if flag is not None else {})
    assert Settings(**flags).hold_limit == expected
    origin = Origins.of(flags)("hold_limit")
    sources = {5000: "--hold-limit", 6000: "SPILLGUARD_HOLD_LIMIT", 7000: path}
    assert origin == sources.get(expected, "default")


def test_precedence_is_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, 'mode = "fail"\nhold_limit = 7000\nupstream = "xai"\n')
    monkeypatch.setenv("SPILLGUARD_MODE", "observe")
    s = Settings(config=path, upstream="deepseek")
    assert (s.mode, s.hold_limit, s.upstream) == (Mode.OBSERVE, 7000, "https://api.deepseek.com/v1")


def test_the_file_is_named_by_flag_over_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = write(tmp_path, 'mode = "observe"\n', "env.toml")
    from_flag = write(tmp_path, 'mode = "fail"\n', "flag.toml")
    monkeypatch.setenv("SPILLGUARD_CONFIG", from_env)
    assert Settings().mode is Mode.OBSERVE
    assert Settings(config=from_flag).mode is Mode.FAIL
    assert Settings(config="").mode is Mode.RETRY  # an empty name reads no file


def test_tables_from_the_environment_replace_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[[rules]]\nmodel = "a*"\nmode = "fail"\n')
    monkeypatch.setenv("SPILLGUARD_RULES", '[{"model": "b*", "mode": "observe"}]')
    (rule,) = Settings(config=path).rules
    assert (rule.model, rule.mode) == ("b*", Mode.OBSERVE)


def test_every_option_can_be_in_the_file(tmp_path: Path) -> None:
    """Each option's default, written into the file, reads back as the same value."""
    defaults = Settings()
    lines = []
    for name in Settings.model_fields:
        value = getattr(defaults, name)
        if name in ("config", "upstreams", "rules") or value is None:
            continue
        if isinstance(value, bool):
            lines.append(f"{name} = {'true' if value else 'false'}")
        elif isinstance(value, int | float):
            lines.append(f"{name} = {value!r}")
        elif isinstance(value, tuple):
            lines.append(f"{name} = []")
        else:
            lines.append(f"{name} = {json.dumps(str(value))}")
    assert len(lines) >= 30
    read = Settings(config=write(tmp_path, "\n".join(lines) + "\n"))
    assert read.model_dump(exclude={"config"}) == defaults.model_dump(exclude={"config"})


def test_a_full_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XAI_KEY", "xai-secret-1")
    path = write(
        tmp_path,
        """
upstream = "deepseek"
mode_header = "tighten"
proxy_keys = ["plain-key"]

[upstreams.grok]
url = "xai"
api_key_env = "XAI_KEY"
anthropic = "https://example.test/anthropic/"

[[rules]]
model = "grok-*"
upstream = "grok"
mode = "fail"
hold_limit = 4096
""",
    )
    s = Settings(config=path)
    grok = s.upstreams["grok"]
    assert (grok.url, grok.anthropic) == ("https://api.x.ai/v1", "https://example.test/anthropic")
    assert grok.key is not None and grok.key.get_secret_value() == "xai-secret-1"
    assert s.rules[0].sets == {"mode": Mode.FAIL, "hold_limit": 4096}
    assert s.mode_header is ModeHeader.TIGHTEN
    assert "xai-secret-1" in s.secrets() and "plain-key" in s.secrets()


def test_proxy_key_tables_mark_keys_that_may_loosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADMIN_KEY", "admin-secret")
    path = write(
        tmp_path,
        """
[[proxy_keys]]
key = "app-key"

[[proxy_keys]]
key_env = "ADMIN_KEY"
may_loosen = true
""",
    )
    s = Settings(config=path)
    assert [k.get_secret_value() for k in s.proxy_keys] == ["app-key", "admin-secret"]
    assert [k.get_secret_value() for k in s.loosening_keys] == ["admin-secret"]
    assert Origins.of({"config": path})("loosening_keys") == path  # marked in the file
    monkeypatch.setenv("SPILLGUARD_LOOSENING_KEYS", "other")
    assert Origins.of({"config": path})("loosening_keys") == "SPILLGUARD_LOOSENING_KEYS"


def test_a_loosening_key_is_a_proxy_key() -> None:
    s = Settings(loosening_keys="only-here")
    assert [k.get_secret_value() for k in s.proxy_keys] == ["only-here"]


def test_workers_get_the_same_settings_without_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--workers` hands the settings to each worker as variables: the same settings, the file
    not read again, the named upstreams' keys read from the variables they inherit."""
    monkeypatch.setenv("XAI_KEY", "xai-secret-1")
    monkeypatch.setenv("ADMIN_KEY", "admin-secret")
    path = write(
        tmp_path,
        """
mode = "fail"
[upstreams.grok]
url = "xai"
api_key_env = "XAI_KEY"
[[rules]]
model = "grok-*"
correction = "Use the tools."
[[proxy_keys]]
key_env = "ADMIN_KEY"
may_loosen = true
""",
    )
    parent = Settings(config=path)
    env = settings_env(parent)
    assert env["SPILLGUARD_CONFIG"] == ""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    write(tmp_path, "this is no longer TOML")  # a worker does not read it
    child = Settings()
    assert child.model_dump() == parent.model_dump() | {"config": ""}
    assert child.upstreams["grok"].key == parent.upstreams["grok"].key
    assert child.loosening_keys == parent.loosening_keys


# ---- what a bad file says --------------------------------------------------------------------


def problems(tmp_path: Path, text: str, **flags: Any) -> list[str]:
    path = write(tmp_path, text)
    given = {"config": path, **flags}
    with pytest.raises((ValidationError, ConfigError)) as caught:
        Settings(**given)
    assert isinstance(caught.value, ValidationError | ConfigError)
    return [line.replace(path, "FILE") for line in explain(caught.value, Origins.of(given))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('mdoe = "fail"', ["FILE: mdoe: not an option (did you mean mode?)"]),
        ("hold-limit = 5000", ["FILE: hold-limit: not an option (did you mean hold_limit?)"]),
        ("colour = 1", ["FILE: colour: not an option"]),
        (
            'config = "other.toml"',
            ["FILE: config: names the file itself; set it with --config or SPILLGUARD_CONFIG"],
        ),
        ("mode = ", ["FILE: not valid TOML: Invalid value (at line 1, column 8)"]),
        (
            'mode = "fial"',
            ["mode: Input should be 'retry', 'fail', 'observe' or 'repair' (FILE)"],
        ),
        ("hold_limit = 10", ["hold_limit: Input should be greater than or equal to 1024 (FILE)"]),
        (
            'upstream = "ftp://x"',
            ["upstream: an http(s) URL or one of: xai, deepseek, openai (FILE)"],
        ),
        (
            'mode_header = "loose"',
            ["mode_header: Input should be 'tighten' or 'any' (FILE)"],
        ),
        (
            '[upstreams.grok]\nurll = "xai"',
            [
                "upstreams.grok: url: Field required (FILE)",
                "upstreams.grok: urll: Extra inputs are not permitted (FILE)",
            ],
        ),
        (
            '[upstreams.Grok]\nurl = "xai"',
            [
                "upstreams: 'Grok' cannot name an upstream: lower-case letters, digits, - and _ "
                "(at most 32, not default, healthz, metrics, readyz, v1) (FILE)"
            ],
        ),
        (
            '[upstreams.default]\nurl = "xai"',
            [
                "upstreams: 'default' cannot name an upstream: lower-case letters, digits, - and "
                "_ (at most 32, not default, healthz, metrics, readyz, v1) (FILE)"
            ],
        ),
        (
            '[upstreams.grok]\nurl = "gopher://x"',
            ["upstreams.grok: url: an http(s) URL or one of: xai, deepseek, openai (FILE)"],
        ),
        (
            '[upstreams.grok]\nurl = "xai"\nanthropic = "nowhere"',
            [
                "upstreams.grok: anthropic: an http(s) URL or one of: deepseek, moonshot, zai, "
                "minimax, anthropic (FILE)"
            ],
        ),
        (
            '[upstreams.grok]\nurl = "xai"\napi_key_env = "SG_TEST_UNSET_KEY"',
            [
                "upstreams.grok: api_key_env: the environment variable SG_TEST_UNSET_KEY is not "
                "set (FILE)"
            ],
        ),
        (
            '[[rules]]\nmodel = "grok-*"',
            ["rules #1: sets nothing: give mode, hold_limit or a correction (FILE)"],
        ),
        (
            '[[rules]]\nmode = "fail"\n[[rules]]\nmode = "strict"',
            ["rules #2: mode: Input should be 'retry', 'fail', 'observe' or 'repair' (FILE)"],
        ),
        (
            '[[rules]]\nmode = "fail"\nhold_limit = 5',
            ["rules #1: hold_limit: Input should be greater than or equal to 1024 (FILE)"],
        ),
        (
            '[[rules]]\nmode = "fail"\nmodels = "x"',
            ["rules #1: models: Extra inputs are not permitted (FILE)"],
        ),
        (
            '[[rules]]\nupstream = "grk"\nmode = "fail"',
            ["rules #1: upstream: 'grk' is not an upstream (default)"],
        ),
        (
            '[[proxy_keys]]\nkey = "a"\nkey_env = "B"',
            ["proxy_keys #1: give key or key_env (one of them)"],
        ),
        ("[[proxy_keys]]\nmay_loosen = true", ["proxy_keys #1: give key or key_env (one of them)"]),
        ('[[proxy_keys]]\nkee = "a"', ["proxy_keys #1: kee: not a key, key_env or may_loosen"]),
        (
            '[[proxy_keys]]\nkey = "a"\nmay_loosen = "yes"',
            ["proxy_keys #1: may_loosen: true or false"],
        ),
        ('[[proxy_keys]]\nkey = " "', ["proxy_keys #1: key: a non-empty string"]),
        (
            '[[proxy_keys]]\nkey_env = "SG_TEST_UNSET_KEY"',
            ["proxy_keys #1: key_env: the environment variable SG_TEST_UNSET_KEY is not set"],
        ),
    ],
)
def test_every_error_names_the_key_and_the_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert problems(tmp_path, text + "\n") == expected


def test_every_unknown_key_is_named_at_once(tmp_path: Path) -> None:
    assert problems(tmp_path, "mdoe = 1\nport = 1\nhots = 2\n") == [
        "FILE: mdoe: not an option (did you mean mode?)",
        "FILE: hots: not an option (did you mean host?)",
    ]


def test_an_error_says_where_its_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILLGUARD_MODE", "fial")
    assert problems(tmp_path, 'mode = "fail"') == [
        "mode: Input should be 'retry', 'fail', 'observe' or 'repair' (SPILLGUARD_MODE)"
    ]
    monkeypatch.delenv("SPILLGUARD_MODE")
    assert problems(tmp_path, "", hold_limit=3) == [
        "hold_limit: Input should be greater than or equal to 1024 (--hold-limit)"
    ]


def test_a_missing_or_unreadable_file_fails(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file$"):
        Settings(config=str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r": not a file$"):
        Settings(config=str(tmp_path))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"mode = \xff\n")
    with pytest.raises(ConfigError, match=r"binary\.toml: not valid TOML"):
        Settings(config=str(binary))
