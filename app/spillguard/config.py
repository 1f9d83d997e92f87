"""The config file: a TOML file of spillguard's options, read through pydantic-settings.

Precedence is flag > `SPILLGUARD_*` variable > file > default, key by key. The file is named by
`--config PATH` or `SPILLGUARD_CONFIG`; its top-level keys are the options (the flags' names
with `_`), beside `[upstreams.NAME]`, `[[rules]]` and `[[proxy_keys]]` tables (`settings.py`).

A file that cannot be used fails before anything starts: `ConfigError` when it cannot be read,
is not TOML or has a key that is no option (or when a table option's variable is not JSON); a
`ValidationError` for a value, which `explain` turns into one line per problem naming the key,
the reason and where the value came from.
`render` prints the resolved settings (secrets as `***`) for `spillguard config check|show`.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Collection, Mapping
from enum import Enum
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, TomlConfigSettingsSource
from pydantic_settings.exceptions import SettingsError

from .incident_store import is_postgres

if TYPE_CHECKING:
    from .policy import Policy
    from .settings import Settings

CONFIG_ENV = "SPILLGUARD_CONFIG"
ENV_PREFIX = "SPILLGUARD_"
SECRET = "***"
# Options printed as tables, after the plain ones (TOML puts tables last).
TABLES = ("upstreams", "rules")
URLS = ("upstream", "anthropic_upstream")  # options whose URL may carry a password
CORRECTIONS = ("correction", "correction_required", "correction_named", "correction_none")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the reason."""


class ConfigFile(TomlConfigSettingsSource):
    """The file as a settings source: every top-level key must be an option.

    `above` names the options a flag or a variable gives: they replace the file's. For
    `loosening_keys` that means the keys its `[[proxy_keys]]` mark `may_loosen` loosen no more
    (they stay proxy keys)."""

    def __init__(
        self, settings_cls: type[BaseSettings], path: str, above: Collection[str] = ()
    ) -> None:
        self.path = path
        file = Path(path).expanduser()
        if not file.is_file():
            reason = "not a file" if file.exists() else "no such file"
            raise ConfigError(f"{path}: {reason}")
        super().__init__(settings_cls, toml_file=file)
        problems = [
            f"{path}: {key}: {_unknown(key, settings_cls)}"
            for key in self.toml_data
            if key == "config" or key not in settings_cls.model_fields
        ]
        if problems:
            raise ConfigError("\n".join(problems))
        entries = self.init_kwargs.get("proxy_keys")
        if "loosening_keys" in above and isinstance(entries, list):
            self.init_kwargs["proxy_keys"] = [_unmarked(entry) for entry in entries]

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        try:
            with file_path.open("rb") as f:
                return tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read it: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: not valid TOML: {exc}") from None


class Environment(EnvSettingsSource):
    """The `SPILLGUARD_*` variables as a settings source: a table option's variable
    (`SPILLGUARD_RULES`, `SPILLGUARD_UPSTREAMS`) that is not JSON is a `ConfigError` naming it."""

    def __call__(self) -> dict[str, Any]:
        try:
            return super().__call__()
        except SettingsError as exc:
            if isinstance(exc.__cause__, ConfigError):
                raise exc.__cause__ from None
            raise

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError as exc:
            variable = ENV_PREFIX + field_name.upper()
            raise ConfigError(f"{variable}: not JSON: {exc}") from None


def _unmarked(entry: object) -> object:
    """A `[[proxy_keys]]` table without its `may_loosen = true` (a bad value is left to fail)."""
    if isinstance(entry, dict) and entry.get("may_loosen") is True:
        return {**entry, "may_loosen": False}
    return entry


def _unknown(key: str, settings_cls: type[BaseSettings]) -> str:
    if key == "config":
        return "names the file itself; set it with --config or SPILLGUARD_CONFIG"
    options = [k for k in settings_cls.model_fields if k != "config"]
    close = difflib.get_close_matches(key.replace("-", "_").lower(), options, n=1)
    return "not an option" + (f" (did you mean {close[0]}?)" if close else "")


# ---- where a value came from, and what was wrong with it -------------------------------------


class Origins:
    """Where each option's value comes from: a flag, the environment, the file or the default."""

    def __init__(self, flags: Mapping[str, Any], path: str | None) -> None:
        self.flags = flags
        self.path = path
        self.file_keys: set[str] = set()
        if path:
            try:
                with Path(path).expanduser().open("rb") as f:
                    self.file_keys = set(tomllib.load(f))
            except (OSError, ValueError):
                pass  # the source itself reports an unreadable file

    @classmethod
    def of(cls, flags: Mapping[str, Any]) -> Origins:
        path = flags.get("config")
        return cls(flags, path if path is not None else os.environ.get(CONFIG_ENV))

    def __call__(self, key: str) -> str:
        if key in self.flags:
            return "--" + key.replace("_", "-")
        if ENV_PREFIX + key.upper() in os.environ:
            return ENV_PREFIX + key.upper()
        if key == "loosening_keys":
            key = "proxy_keys"  # in the file, [[proxy_keys]] tables mark them
        if key in self.file_keys and self.path:
            return self.path
        return "default"


def explain(error: ValidationError | ConfigError, origin: Origins) -> list[str]:
    """One line per problem: the key, the reason, and where the value came from."""
    if isinstance(error, ConfigError):
        return str(error).splitlines()
    lines = []
    for problem in error.errors():
        loc = problem["loc"]
        reason = str(problem["msg"]).removeprefix("Value error, ")
        if not loc:  # a check across options: its message names them
            lines.append(reason)
            continue
        lines.append(f"{_where(loc)}: {reason} ({origin(str(loc[0]))})")
    return lines


def _where(loc: tuple[int | str, ...]) -> str:
    """`rules #2: mode` for ("rules", 1, "mode"); `upstreams.grok: url`; `mode`."""
    head, *rest = loc
    where = str(head)
    if rest and isinstance(rest[0], int) and head in ("rules", "proxy_keys", "loosening_keys"):
        where, rest = f"{head} #{rest[0] + 1}", rest[1:]
    elif rest and head == "upstreams":
        where, rest = f"upstreams.{rest[0]}", rest[1:]
    return ": ".join([where, *(str(p) for p in rest)]) if rest else where


# ---- the resolved settings, printed ----------------------------------------------------------


def render(settings: Settings, origin: Origins) -> str:
    """The resolved settings as TOML, each option with where its value came from; secrets are
    `***`, and a closing summary says which policy each kind of request gets."""
    lines = [
        "# spillguard's settings, resolved: flag > environment > file > default. Secrets: ***.",
    ]
    if origin.path:
        lines.append(f"# config file: {origin.path}")
    lines.append("")
    for name in type(settings).model_fields:
        if name == "config" or name in TABLES:
            continue
        value = getattr(settings, name)
        if name in URLS and value is not None:
            value = _without_password(value)
        shown = "# " + name + " is not set" if value is None else f"{name} = {_toml(value)}"
        note = ""
        if name == "incidents_db" and is_postgres(value):  # its password is a secret
            from .incident_postgres import shown as without_password

            shown, note = f"{name} = {_toml(without_password(value))}", " (password hidden)"
        lines.append(f"{shown}  # {origin(name)}{note}")
    for name, entry in settings.upstreams.items():
        lines += ["", f"[upstreams.{name}]  # served at /{name}/v1 ({origin('upstreams')})"]
        lines.append(f"url = {_toml(_without_password(entry.url))}")
        if entry.api_key_env is not None:
            lines.append(f"api_key_env = {_toml(entry.api_key_env)}  # set: {SECRET}")
        if entry.anthropic is not None:
            lines.append(f"anthropic = {_toml(_without_password(entry.anthropic))}")
    for number, rule in enumerate(settings.rules, 1):
        lines += ["", f"[[rules]]  # {number} ({origin('rules')})"]
        lines += [f"{k} = {_toml(v)}" for k, v in rule if v is not None]
    lines += ["", *summary(settings)]
    return "\n".join(lines) + "\n"


def _without_password(url: str) -> str:
    """An upstream URL with its userinfo's secrets as ***: the password whole (the userinfo ends
    at the last '@', as aiohttp reads it), or the user when no password follows it (a token
    given as the user). A user name before a password is shown, as for incidents_db."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:{SECRET}" if colon else SECRET
    return urlunsplit(parts._replace(netloc=f"{masked}@{host}"))


def summary(settings: Settings) -> list[str]:
    """Which policy each kind of request is held to, as comment lines."""
    from .rules import Rules

    rules = Rules(settings)
    out = ["# The policy a request is held to (the first matching rule, else the options):"]
    for number, (rule, policy) in enumerate(zip(settings.rules, rules.policies, strict=True), 1):
        on = f"on {rule.upstream}" if rule.upstream is not None else "on any upstream"
        out.append(f"#   {number}. model {rule.model} {on}: {_policy(policy)}")
    out.append(f"#   otherwise: {_policy(rules.default)}")
    loosen = len(settings.loosening_keys)
    if settings.mode_header == "any":
        header = "any mode"
    else:
        header = "a mode at least as strict (observe < retry = repair < fail)"
        header += f"; any mode with a proxy key marked may_loosen ({loosen})" if loosen else ""
    out.append(f"# x-spillguard-mode may ask for {header}.")
    return out


def _policy(policy: Policy) -> str:
    from .settings import Settings

    fields = Settings.model_fields
    custom = [n for n in CORRECTIONS if getattr(policy, n) != fields[n].default]
    text = f"mode {policy.mode}, hold_limit {policy.hold_limit}"
    return text + (f", custom {', '.join(custom)}" if custom else "")


def _toml(value: Any) -> str:
    if isinstance(value, SecretStr):
        return json.dumps(SECRET)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return json.dumps(value.value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string


# ---- values the file reads from the environment -----------------------------------------


def env_secret(variable: str) -> SecretStr:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ValueError(f"the environment variable {variable} is not set")
    return SecretStr(value)


def key_entry(entry: dict[str, Any], number: int) -> str:
    """The key of one `[[proxy_keys]]` table."""
    where = f"proxy_keys #{number}"
    unknown = set(entry) - {"key", "key_env", "may_loosen"}
    if unknown:
        raise ValueError(f"{where}: {', '.join(sorted(unknown))}: not a key, key_env or may_loosen")
    if not isinstance(entry.get("may_loosen", False), bool):
        raise ValueError(f"{where}: may_loosen: true or false")
    if ("key" in entry) == ("key_env" in entry):
        raise ValueError(f"{where}: give key or key_env (one of them)")
    if "key_env" in entry:
        try:
            return env_secret(str(entry["key_env"])).get_secret_value()
        except ValueError as exc:
            raise ValueError(f"{where}: key_env: {exc}") from None
    key = entry["key"]
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"{where}: key: a non-empty string")
    return key.strip()
