"""Server configuration, read once from `GYM_*` environment variables (and `.env`), validated at start-up.

Groups nest with `__`: `GYM_SESSIONS__MAX_SESSIONS=5000`. `GYM_DATABASE_URL` is accepted as a short alias
for `GYM_STORE__URL` because it is what operators type. Tests build `Settings(...)` with keyword
arguments and hand it to `create_app`; nothing else in the package reads `os.environ`.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gym_server.core.egress import DEFAULT_POLICY_URLS, parse_prefix
from gym_server.core.egress_policy import parse_rule

__all__ = [
    "AuthSettings",
    "EgressSettings",
    "GatewaySettings",
    "HttpSettings",
    "JudgeSettings",
    "LimitSettings",
    "QuotaSettings",
    "SandboxSettings",
    "SessionSettings",
    "Settings",
    "StoreSettings",
    "data_dir",
    "default_store_path",
    "get_settings",
    "stray_store_path",
]

# Where the store used to default to, relative to the current directory (before issue 24).
LEGACY_DB_PATH = Path("var/gym.db")


def data_dir() -> Path:
    """The gym's own data folder: `$GYM_HOME` when set, else `${XDG_DATA_HOME:-~/.local/share}/gym-server`.

    Read on each call (not at import), so a test or a command that sets `GYM_HOME` moves everything the
    gym keeps on disk: the default store and the caches environments keep under `cache/`.
    """
    home = os.environ.get("GYM_HOME")
    if home:
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "gym-server"


def default_store_path() -> Path:
    """The SQLite file used when neither `GYM_STORE__URL` nor `GYM_STORE__PATH` says otherwise.

    It never depends on the current directory (a command run from elsewhere would find nothing and start
    a second, empty store): `gym.db` in `data_dir()`.
    """
    return data_dir() / "gym.db"


class SessionSettings(BaseModel):
    """Session lifetime and capacity."""

    max_sessions: int = Field(10_000, ge=1, description="live sessions before new ones get 429")
    default_ttl_s: float = Field(600.0, gt=0, description="idle time-to-live when a session asks for none")
    max_ttl_s: float = Field(3_600.0, gt=0, description="largest idle TTL a session may ask for")
    reap_interval_s: float = Field(1.0, gt=0, description="how often the reaper looks for idle sessions")
    tombstone_s: float = Field(
        3_600.0, ge=0, description="how long a closed id still answers 410 instead of 404"
    )
    retry_after_s: int = Field(2, ge=1, description="Retry-After sent with 429")
    max_forks: int = Field(
        16, ge=1, description="live sessions one fork request may open (422 above; docs/fork.md)"
    )

    @model_validator(mode="after")
    def _ttl_order(self) -> SessionSettings:
        if self.default_ttl_s > self.max_ttl_s:
            raise ValueError("sessions.default_ttl_s must not exceed sessions.max_ttl_s")
        return self


class LimitSettings(BaseModel):
    """Per-request and per-episode budgets."""

    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="largest request body (413 above)")
    max_turns: int = Field(
        64, ge=1, description="assistant turns per episode unless the environment says fewer"
    )
    max_transcript_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="bytes of messages and turn data that end an episode"
    )
    max_tool_calls_per_turn: int = Field(
        32, ge=1, description="tool calls executed from one assistant message"
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="wall-clock limit on one tool call")
    verify_timeout_s: float = Field(60.0, gt=0, description="wall-clock limit on one verification")
    loop_lag_warn_ms: float = Field(
        100.0, gt=0, description="event-loop lag above which a WARNING names the request and code holding it"
    )


class HttpSettings(BaseModel):
    """What one client connection may hold (`gym-server serve`), so slow or half-open ones cannot
    exhaust the server (gym_server/api/http_protocol.py), and which `Host` and `Origin` values a request
    may name (gym_server/api/host_guard.py, docs/security.md)."""

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="host names requests may name beside loopback's and the bind address ('*': any)",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="browser origins (scheme://host[:port]) besides the server's own that may change state",
    )

    header_timeout_s: float = Field(
        10.0, gt=0, description="from connect (or a later request's first byte) to the end of its head"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="from the end of a request's head to its body's end"
    )
    keep_alive_s: int = Field(5, ge=1, description="idle time between requests before a connection is closed")
    max_connections: int = Field(
        2048, ge=1, description="open connections; a request on one more gets 503 and is closed"
    )


class RolloutRunSettings(BaseModel):
    """Server-driven rollout runs (`POST /v1/rollouts`), held in this process's memory."""

    max_running: int = Field(8, ge=1, description="runs playing at once; one more gets 429")
    keep_finished: int = Field(
        256, ge=0, description="finished runs whose final view GET /v1/rollouts/runs/{id} still answers"
    )
    max_concurrency: int = Field(
        16, ge=1, description="episodes one run plays at once; a request asking for more gets this many"
    )
    session_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="share of sessions.max_sessions all runs together may hold; direct clients keep the rest",
    )
    policy_urls: list[str] = Field(
        default_factory=lambda: list(DEFAULT_POLICY_URLS),
        description=(
            "URL prefixes of the policy endpoints a run may call (gym_server.core.egress); others get 422"
        ),
    )

    @field_validator("policy_urls")
    @classmethod
    def _prefixes_parse(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            try:
                parse_prefix(prefix)
            except ValueError as exc:
                raise ValueError(f"rollout_runs.policy_urls: {prefix!r}: {exc}") from None
        return prefixes


class GatewaySettings(BaseModel):
    """The recording OpenAI-compatible gateway of an episode (gym_server/gateway, docs/gateway.md). Its
    upstreams are the policy endpoints of `rollout_runs.policy_urls`, under the same rules."""

    connect_timeout_s: float = Field(5.0, gt=0, description="connecting to the upstream; beyond it 502")
    upstream_timeout_s: float = Field(
        300.0, gt=0, description="waiting for the upstream's answer (each read of a stream); beyond it 504"
    )
    call_deadline_s: float = Field(
        1800.0,
        gt=0,
        description="a whole call, from sending it to the answer's last byte (a stream's too); beyond "
        "it 504, however steadily the upstream trickles",
    )


class StoreSettings(BaseModel):
    """Where trajectories go and how they are written."""

    url: str = Field("", description="SQLAlchemy URL; empty means SQLite at store.path")
    path: Path = Field(
        default_factory=default_store_path,
        description="SQLite file used when no URL is given (default: $GYM_HOME/gym.db, else "
        "$XDG_DATA_HOME/gym-server/gym.db, else ~/.local/share/gym-server/gym.db)",
    )
    flush_interval_s: float = Field(0.2, gt=0, description="the writer's batching window")
    batch_size: int = Field(256, ge=1, description="rows written per transaction at most")
    commit_timeout_s: float = Field(
        10.0, gt=0, description="how long a create or close waits for its row to commit before a 503"
    )

    def resolved_url(self) -> str:
        return self.url or f"sqlite:///{self.path.expanduser()}"

    def stray_warning(self, cwd: Path | None = None) -> str | None:
        """The warning to print when `stray_store_path` finds an old store, naming both files."""
        stray = stray_store_path(self, cwd)
        if stray is None:
            return None
        return (
            f"{stray} exists but is not the store in use ({self.path.expanduser()}): trajectories "
            "written there by an older gym-server stay there. To keep using it, set "
            f"GYM_STORE__PATH={stray.resolve()} (or move it to {self.path.expanduser()})"
        )


def stray_store_path(store: StoreSettings, cwd: Path | None = None) -> Path | None:
    """`./var/gym.db` when it exists but is not the store in use: the old default's data, which a user
    upgrading from a version that stored relative to the current directory would otherwise lose sight of.
    Callers warn with both paths; nothing is moved or merged silently."""
    if store.url:
        return None
    legacy = (cwd or Path.cwd()) / LEGACY_DB_PATH
    if not legacy.is_file():
        return None
    try:
        same = legacy.resolve() == store.path.expanduser().resolve()
    except OSError:
        same = False
    return None if same else legacy


class EgressSettings(BaseModel):
    """The operator's say over sandbox egress (see gym_server/sandbox/egress): on/off and a ceiling.

    Environments declare the `host:port` entries their sandboxes may reach; the operator can switch
    egress off for every sandbox, or cap it: with `allowed` set, only entries also listed there are
    kept (the rest are dropped with a warning), so an installed environment cannot widen it alone.
    """

    enabled: bool = Field(
        True, description="False: every sandbox stays offline, whatever environments declare"
    )
    allowed: list[str] | None = Field(
        None, description="host:port entries environments may use (default: any they declare)"
    )
    max_connections: int = Field(32, ge=1, description="connections one sandbox may hold open at once")
    connect_timeout_s: float = Field(10.0, gt=0, description="how long a connection upstream may take")

    @field_validator("allowed")
    @classmethod
    def _entries(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            parse_rule(entry)
        return value


class SandboxSettings(BaseModel):
    """Which sandbox backend runs model-written code, and how many sandboxes may run at once.

    The cap and the budgets bound sessions' sandboxes and verification's loans together; left unset
    (None), each is derived from the cores and memory the server may use (its cgroup's, where lower).
    """

    backend: Literal["auto", "docker", "bubblewrap", "unsafe-no-sandbox", "ray"] = "auto"
    # `ray`: sandboxes leased from the SandboxHost actors of a Ray cluster's `sandbox` nodes (docs/scale.md)
    host_backend: Literal["auto", "docker", "bubblewrap"] = Field(
        "auto", description="with backend=ray: the backend each sandbox node's SandboxHost runs"
    )
    ray_hosts: str = Field(
        "gym-sandbox-host",
        description="with backend=ray: the SandboxHost actors' name prefix (set by serve --ray)",
    )
    image: str = "gym-sandbox:latest"
    tools_dir: Path | None = Field(
        None,
        description="host folder shown read-only at /opt/gym-tools in every docker or bubblewrap sandbox "
        "(tools such as MCP servers, installed with `pip install --target`)",
    )
    pool_size: int = Field(2, ge=0)
    max_running: int | None = Field(
        None, ge=1, description="sandboxes running at once, sessions' and verification's (default 4 per core)"
    )
    memory_budget_mb: int | None = Field(
        None, ge=1, description="sum of running sandboxes' memory limits (default half the memory)"
    )
    cpu_budget: float | None = Field(
        None, gt=0, description="sum of running sandboxes' CPU quotas, in cores (default 4 per core)"
    )
    queue_wait_s: float = Field(
        10.0, ge=0, description="how long verification waits for a free sandbox before 429"
    )
    retry_after_s: int = Field(2, ge=1, description="Retry-After sent when no sandbox is free")
    egress: EgressSettings = EgressSettings()


class QuotaSettings(BaseModel):
    """What one tenant may use; None is no limit. Answered with 429 problem+json and `Retry-After`."""

    live_sessions: int | None = Field(None, ge=1, description="live sessions one tenant may hold")
    sandbox_seconds: float | None = Field(
        None, gt=0, description="session wall seconds (each may hold a sandbox) one tenant may use per window"
    )
    window_s: float = Field(3_600.0, gt=0, description="the sandbox-seconds window, in seconds")
    requests_per_s: float | None = Field(None, gt=0, description="sustained requests per second per tenant")
    burst: int = Field(20, ge=1, description="requests a tenant may send at once above its rate")


class AuthSettings(BaseModel):
    """API keys, scopes and tenants (gym_server.auth).

    `auto` turns authentication on exactly when the server binds a non-loopback address; `off` on such
    an address is allowed but logged as a warning at start.
    """

    mode: Literal["auto", "on", "off"] = "auto"
    refresh_s: float = Field(
        1.0, gt=0, le=60, description="how often the in-memory key table is reloaded (revocation delay)"
    )
    ui_session_ttl_s: float = Field(8 * 3_600.0, gt=0, description="how long a /ui login lasts")
    quotas: QuotaSettings = QuotaSettings()


class JudgeSettings(BaseModel):
    """The LLM judge environments score with when they declare a rubric (`gym_verifiers.judging`).

    Unset (`url` empty), judged environments fall back to their rule-based scoring, each documented in
    its README. The URL is the operator's: the server calls no judge a request names.
    """

    url: str = Field("", description="OpenAI-compatible API root of the judge, e.g. http://127.0.0.1:8001/v1")
    model: str = Field("", description="the model name the judge endpoint serves")
    api_key: SecretStr | None = Field(None, description="sent as a bearer token when set")
    timeout_s: float = Field(15.0, gt=0, description="per request, connect to last byte")
    max_attempts: int = Field(3, ge=1, le=10, description="attempts before a judgement is judge_failed")
    max_tokens: int = Field(256, ge=16, le=8192, description="the judge's completion budget")
    json_mode: bool = Field(False, description="ask for response_format json_object (servers that have it)")

    @model_validator(mode="after")
    def _model_with_url(self) -> JudgeSettings:
        if self.url and not self.model:
            raise ValueError("GYM_JUDGE__MODEL must name the judge model when GYM_JUDGE__URL is set")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"GYM_JUDGE__URL must be an http(s) URL, got {self.url!r}")
        return self


class Settings(BaseSettings):
    """Everything the server can be told. See the configuration table in the README."""

    model_config = SettingsConfigDict(
        env_prefix="GYM_", env_nested_delimiter="__", env_file=".env", extra="ignore", populate_by_name=True
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    server_name: str = Field(
        "",
        description="this replica's identity (default host:port); its live rows become lost at restart",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    database_url: str = Field("", validation_alias=AliasChoices("GYM_DATABASE_URL", "database_url"))
    catalog_warmup: Literal["background", "before_serving", "off"] = Field(
        "background",
        description="when each environment's first-use work (imports, datasets, versions) is done: in a "
        "thread once the server listens, in a thread before it listens, or at first use (in a thread)",
    )
    sessions: SessionSettings = SessionSettings()
    limits: LimitSettings = LimitSettings()
    http: HttpSettings = HttpSettings()
    rollout_runs: RolloutRunSettings = RolloutRunSettings()
    gateway: GatewaySettings = GatewaySettings()
    store: StoreSettings = Field(default_factory=StoreSettings)  # its path reads GYM_HOME when built
    sandbox: SandboxSettings = SandboxSettings()
    auth: AuthSettings = AuthSettings()
    judge: JudgeSettings = JudgeSettings()

    @model_validator(mode="after")
    def _defaults_from_other_fields(self) -> Settings:
        # host:port, not the host alone: two servers on one machine sharing a database must not mark
        # each other's live sessions lost when one of them restarts.
        if not self.server_name:
            self.server_name = f"{socket.gethostname()}:{self.port}"
        if self.database_url and not self.store.url:
            self.store = self.store.model_copy(update={"url": self.database_url})
        # A judge slower than the verifier's limit would turn every judge outage into verify_timeout
        # (a misleading class) instead of judge_failed.
        judging_s = self.judge.timeout_s * self.judge.max_attempts
        if self.judge.url and judging_s >= self.limits.verify_timeout_s:
            raise ValueError(
                f"GYM_JUDGE__TIMEOUT_S x GYM_JUDGE__MAX_ATTEMPTS ({judging_s:g} s) must stay below "
                f"GYM_LIMITS__VERIFY_TIMEOUT_S ({self.limits.verify_timeout_s:g} s)"
            )
        return self


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
