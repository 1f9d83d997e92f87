"""The one immutable settings object, read from flags, `SPILLGUARD_*` variables and the config
file, in that order of precedence (then the defaults).

Besides the options, the file (`config.py` reads it) can name upstreams served at `/NAME/v1`
(`[upstreams.NAME]`), rules that set a request's policy by model and upstream (`[[rules]]`), and
proxy keys whose requests may loosen their mode (`[[proxy_keys]]` with `may_loosen = true`).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .config import CONFIG_ENV, ConfigFile, Environment, env_secret, key_entry
from .policy import Mode as Mode  # re-exported: the modes are options
from .policy import ModeHeader as ModeHeader
from .rules import Rule
from .spans import parse_span

PROVIDERS = {
    "xai": "https://api.x.ai/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "openai": "https://api.openai.com/v1",
}

# Anthropic-compatible endpoints, as the Anthropic SDK takes them (without /v1).
ANTHROPIC_PROVIDERS = {
    "deepseek": "https://api.deepseek.com/anthropic",
    "moonshot": "https://api.moonshot.ai/anthropic",
    "zai": "https://api.z.ai/api/anthropic",
    "minimax": "https://api.minimax.io/anthropic",
    "anthropic": "https://api.anthropic.com",
}

DEFAULT_CORRECTION = (
    "Your previous reply wrote a tool call out as text instead of calling the tool. "
    "If a tool is needed, call it through the tool-calling interface; otherwise answer "
    "the user in plain prose. Do not write tool-call markup or JSON tool calls as text."
)
# The retry's instruction when the request's tool_choice requires a call, names a function
# (`{name}` is replaced by its name), or forbids calls.
CORRECTION_REQUIRED = (
    "Your previous reply wrote a tool call out as text instead of calling the tool, so no tool "
    "ran. This turn must call a tool: call it through the tool-calling interface. Do not write "
    "tool-call markup or JSON tool calls as text."
)
CORRECTION_NAMED = (
    "Your previous reply wrote a tool call out as text instead of calling the tool, so no tool "
    "ran. Call the {name} tool through the tool-calling interface. Do not write tool-call "
    "markup or JSON tool calls as text."
)
CORRECTION_NONE = (
    "Your previous reply wrote a tool call out as text, but no tool may be called in this turn. "
    "Answer the user in plain prose, without tool-call markup or JSON tool calls."
)


DEFAULT_UPSTREAM = "default"  # the name of the upstream served at /v1
# Names a named upstream may not take: its /NAME/v1 would shadow spillguard's own routes.
RESERVED_NAMES = frozenset({DEFAULT_UPSTREAM, "v1", "healthz", "readyz", "metrics"})
UPSTREAM_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def resolve_upstream(value: str) -> str:
    value = PROVIDERS.get(value.strip().lower(), value.strip())
    if not value.startswith(("http://", "https://")):
        raise ValueError("an http(s) URL or one of: " + ", ".join(PROVIDERS))
    return value.rstrip("/")


def resolve_anthropic(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    value = ANTHROPIC_PROVIDERS.get(value.strip().lower(), value.strip())
    if not value.startswith(("http://", "https://")):
        raise ValueError("an http(s) URL or one of: " + ", ".join(ANTHROPIC_PROVIDERS))
    return value.rstrip("/")


class UpstreamEntry(BaseModel):
    """One `[upstreams.NAME]`: an upstream served at `/NAME/v1`, with its own injected key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="Base URL an SDK would use, or xai, deepseek, openai.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding the key injected upstream."
    )
    anthropic: str | None = Field(
        None, description="Anthropic-compatible base URL (without /v1), or a shortcut."
    )
    _key: SecretStr | None = PrivateAttr(None)

    @property
    def key(self) -> SecretStr | None:
        """The injected key, read from `api_key_env` when the settings were made."""
        return self._key

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return resolve_upstream(value)

    @field_validator("anthropic")
    @classmethod
    def _anthropic(cls, value: str | None) -> str | None:
        return resolve_anthropic(value)

    @model_validator(mode="after")
    def _read_key(self) -> UpstreamEntry:
        if self.api_key_env is not None:
            try:
                self._key = env_secret(self.api_key_env)
            except ValueError as exc:
                raise ValueError(f"api_key_env: {exc}") from None
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPILLGUARD_", frozen=True, extra="ignore")

    config: str | None = Field(
        None, description="TOML file with any of these options, upstreams and rules."
    )

    upstream: str = Field(
        "http://127.0.0.1:8000/v1",
        description="Base URL an SDK would use, or a provider shortcut: xai, deepseek, openai.",
    )
    anthropic_upstream: str | None = Field(
        None,
        description="Anthropic-compatible base URL (without /v1), or deepseek, moonshot, zai, "
        "minimax, anthropic: /v1/messages and every request with anthropic-version go there.",
    )
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    mode: Mode = Mode.RETRY
    correction: str = Field(DEFAULT_CORRECTION, description="Instruction sent with the retry.")
    correction_required: str = Field(
        CORRECTION_REQUIRED, description="The retry's instruction when tool_choice is required."
    )
    correction_named: str = Field(
        CORRECTION_NAMED, description="The retry's instruction when tool_choice names {name}."
    )
    correction_none: str = Field(
        CORRECTION_NONE, description="The retry's instruction when tool_choice is none."
    )
    should_retry_header: str = Field(
        "false", description="Value of x-should-retry on spillguard's own 502 ('' to omit)."
    )
    connect_timeout: Annotated[float, Field(gt=0)] = 10.0
    read_timeout: Annotated[float, Field(gt=0)] = 120.0
    total_timeout: Annotated[float, Field(gt=0)] = 600.0
    hold_limit: Annotated[int, Field(ge=1024)] = 256 * 1024
    max_body: Annotated[int, Field(ge=1024)] = 16 * 1024 * 1024
    max_reply: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    keepalive: Annotated[float, Field(gt=0)] = 15.0
    max_concurrency: Annotated[int, Field(ge=0)] = 0
    upstream_key: SecretStr | None = Field(
        None, description="Key injected upstream as a bearer token, replacing the client's."
    )
    proxy_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (), description="Keys clients must present (comma-separated in the environment)."
    )
    proxy_key_file: str | None = Field(None, description="File with one proxy key per line.")
    leak_log_level: str = "WARNING"
    excerpt_limit: Annotated[int, Field(ge=0)] = 2000
    log_level: str = "INFO"
    log_format: str = Field("console", pattern="^(console|json)$")
    graceful_timeout: Annotated[float, Field(ge=0)] = 30.0
    workers: Annotated[int, Field(ge=1)] = 1
    incidents_db: str = Field(
        "spillguard-incidents.sqlite3",
        description="SQLite file, or a postgresql:// URL shared by a fleet, recording every "
        "finding ('' disables the incident record).",
    )
    incident_retention: str = Field(
        "30d", description="Incidents older than this are deleted: 12h, 30d, 2w ('' keeps them)."
    )
    incident_max_rows: Annotated[int, Field(ge=0)] = Field(
        1_000_000, description="Incidents kept at most, the oldest deleted first (0: no cap)."
    )
    incident_excerpt_limit: Annotated[int, Field(ge=0)] = Field(
        4000, description="Characters of leaked text kept per incident."
    )
    metrics_model_limit: Annotated[int, Field(ge=1)] = Field(
        50, description="Distinct model label values per worker before 'other'."
    )
    otel_traces: bool = Field(
        False, description="OpenTelemetry traces over OTLP/HTTP (needs the otel extra)."
    )
    otel_leaked_text: bool = Field(
        False, description="Put the leaked text (cut to excerpt_limit) on the trace's spans."
    )
    mode_header: ModeHeader = Field(
        ModeHeader.TIGHTEN,
        description="What x-spillguard-mode may do: tighten (only a stricter mode) or any.",
    )
    loosening_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (),
        description="Proxy keys whose requests may also loosen the mode with x-spillguard-mode "
        "(in the file: [[proxy_keys]] with may_loosen = true).",
    )
    upstreams: dict[str, UpstreamEntry] = Field(
        default_factory=dict, description="Upstreams served at /NAME/v1, by NAME."
    )
    rules: tuple[Rule, ...] = Field((), description="Policy by model and upstream, in order.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (the keyword arguments) over the environment (`config.Environment`, not
        `env_settings`: its bad JSON names the variable) over the file."""
        flags = getattr(init_settings, "init_kwargs", {})
        environment = Environment(settings_cls)
        path = flags["config"] if flags.get("config") is not None else os.environ.get(CONFIG_ENV)
        if not path:
            return init_settings, environment
        above = set(flags) | set(environment())
        return init_settings, environment, ConfigFile(settings_cls, path, above)

    @field_validator("upstream")
    @classmethod
    def _resolve_upstream(cls, value: str) -> str:
        return resolve_upstream(value)

    @field_validator("anthropic_upstream")
    @classmethod
    def _resolve_anthropic(cls, value: str | None) -> str | None:
        return resolve_anthropic(value)

    @model_validator(mode="before")
    @classmethod
    def _key_entries(cls, data: Any) -> Any:
        """`proxy_keys` entries that are tables (`key` or `key_env`, and `may_loosen`) become
        plain keys, those marked `may_loosen` listed in `loosening_keys` too (a flag or a
        variable giving `loosening_keys` replaces the file's marks: `ConfigFile`)."""
        if not isinstance(data, dict) or not isinstance(data.get("proxy_keys"), list | tuple):
            return data
        plain: list[Any] = []
        loosening = list(_split(data.get("loosening_keys", ())))
        for number, entry in enumerate(data["proxy_keys"], 1):
            if not isinstance(entry, dict):
                plain.append(entry)
                continue
            key = key_entry(entry, number)
            plain.append(key)
            if entry.get("may_loosen") is True:
                loosening.append(key)
        return {**data, "proxy_keys": tuple(plain), "loosening_keys": tuple(loosening)}

    @field_validator("proxy_keys", "loosening_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        return _split(value)

    @field_validator("upstreams")
    @classmethod
    def _names(cls, value: dict[str, UpstreamEntry]) -> dict[str, UpstreamEntry]:
        for name in value:
            if not UPSTREAM_NAME.fullmatch(name) or name in RESERVED_NAMES:
                raise ValueError(
                    f"{name!r} cannot name an upstream: lower-case letters, digits, - and _ "
                    f"(at most 32, not {', '.join(sorted(RESERVED_NAMES))})"
                )
        return value

    @model_validator(mode="after")
    def _read_key_file(self) -> Settings:
        if self.proxy_key_file:
            try:
                with open(self.proxy_key_file, encoding="utf-8") as f:
                    keys = tuple(SecretStr(line.strip()) for line in f if line.strip())
            except OSError as exc:
                raise ValueError(f"cannot read proxy_key_file: {exc.strerror}") from None
            object.__setattr__(self, "proxy_keys", self.proxy_keys + keys)
        return self

    @model_validator(mode="after")
    def _check_policy(self) -> Settings:
        names = [DEFAULT_UPSTREAM, *self.upstreams]
        for number, rule in enumerate(self.rules, 1):
            if rule.upstream is not None and rule.upstream not in names:
                raise ValueError(
                    f"rules #{number}: upstream: {rule.upstream!r} is not an upstream "
                    f"({', '.join(names)})"
                )
        plain = {k.get_secret_value() for k in self.proxy_keys}
        missing = tuple(k for k in self.loosening_keys if k.get_secret_value() not in plain)
        object.__setattr__(self, "proxy_keys", self.proxy_keys + missing)  # they are proxy keys
        return self

    def secrets(self) -> list[str]:
        """Every key the settings hold, for redaction."""
        keys = [k.get_secret_value() for k in self.proxy_keys]
        injected = [self.upstream_key, *(e.key for e in self.upstreams.values())]
        return keys + [k.get_secret_value() for k in injected if k is not None]

    @field_validator("incidents_db")
    @classmethod
    def _incidents_target(cls, value: str) -> str:
        scheme = value.partition("://")[0].lower() if "://" in value else None
        if scheme not in (None, "postgresql", "postgres"):
            raise ValueError("a SQLite file path or a postgresql:// URL")
        return value

    @field_validator("incident_retention")
    @classmethod
    def _retention(cls, value: str) -> str:
        value = value.strip()
        span = parse_span(value)
        if value not in ("", "0") and (span is None or span.total_seconds() <= 0):
            raise ValueError("a span such as 12h, 30d or 2w ('' or 0 keeps incidents)")
        return value

    @field_validator("leak_log_level", "log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        value = value.upper()
        if value not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("a log level: DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return value


def _split(value: object) -> Any:
    """Keys given as one comma-separated string (in the environment) as a tuple."""
    if isinstance(value, str):
        return tuple(k.strip() for k in value.split(",") if k.strip())
    return value
