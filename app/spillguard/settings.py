"""The one immutable settings object, read from flags and `SPILLGUARD_*` variables."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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


class Mode(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    OBSERVE = "observe"
    REPAIR = "repair"  # a readable leak becomes the structured call; anything else retries


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPILLGUARD_", frozen=True, extra="ignore")

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

    @field_validator("upstream")
    @classmethod
    def _resolve_upstream(cls, value: str) -> str:
        value = PROVIDERS.get(value.strip().lower(), value.strip())
        if not value.startswith(("http://", "https://")):
            raise ValueError("upstream must be an http(s) URL or one of: " + ", ".join(PROVIDERS))
        return value.rstrip("/")

    @field_validator("anthropic_upstream")
    @classmethod
    def _resolve_anthropic(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = ANTHROPIC_PROVIDERS.get(value.strip().lower(), value.strip())
        if not value.startswith(("http://", "https://")):
            names = ", ".join(ANTHROPIC_PROVIDERS)
            raise ValueError(f"anthropic_upstream must be an http(s) URL or one of: {names}")
        return value.rstrip("/")

    @field_validator("proxy_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(k.strip() for k in value.split(",") if k.strip())
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
