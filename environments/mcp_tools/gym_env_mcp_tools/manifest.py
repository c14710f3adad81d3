"""The manifest that turns an MCP server into a gym environment: what to run, on which tasks, scored how.

A manifest is a JSON file (`manifest.json` beside the environment's README), validated here so that a
broken one fails at registration, naming the field, and never at the first episode. The server's
command runs inside the session's sandbox, so it names programs as the sandbox sees them: the
sandbox's `python3` and packages under the tools folder (`/opt/gym-tools`, `GYM_SANDBOX__TOOLS_DIR`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym_server.sdk.runtime import parse_rule

__all__ = ["HttpServer", "McpManifest", "StdioServer", "VerifierSpec", "load_manifest"]

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)]


class StdioServer(BaseModel):
    """An MCP server started for each episode inside the episode's sandbox, spoken to over stdio.

    Attributes:
        command: argv inside the sandbox, e.g. `["python3", "-m", "mcp_server_time"]`.
        env: environment variables inside the sandbox (the host's never enter it).
        memory_mb, pids, cpus, disk_mb: the sandbox's limits (the gym's locked-down defaults otherwise).
        startup_timeout_s: start, initialize and list the tools within this, or the session is refused.
        call_timeout_s: one tool call's deadline; past it the episode ends (`sandbox_timeout`).
        egress: `host:port` entries the server may reach through the gym's filtering proxy (none:
            offline); see `Environment.egress`.
    """

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio"]
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    memory_mb: int = Field(512, ge=32)
    pids: int = Field(64, ge=4)
    cpus: float = Field(1.0, gt=0)
    disk_mb: int = Field(64, ge=1)
    startup_timeout_s: float = Field(20.0, gt=0)
    call_timeout_s: float = Field(10.0, gt=0)
    egress: list[str] = Field(default_factory=list)

    @field_validator("egress")
    @classmethod
    def _egress(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_rule(entry)
        return value


class HttpServer(BaseModel):
    """A running MCP server reached over streamable HTTP: one MCP session per episode, no sandbox.

    The URL is the operator's (manifests are installed code, never a request's), so this is the one way
    an episode reaches beyond its sandbox. The server's state is its own: episodes are independent only
    as far as its sessions are (the gym closes each with DELETE at the episode's end).

    Attributes:
        url: the server's MCP endpoint, `http://` or `https://`.
        startup_timeout_s: connect, initialize and list the tools within this, or the session is refused.
        call_timeout_s: one tool call's deadline; past it the episode ends (`env_error`).
    """

    model_config = ConfigDict(extra="forbid")

    transport: Literal["streamable-http"]
    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2000)]
    startup_timeout_s: float = Field(20.0, gt=0)
    call_timeout_s: float = Field(10.0, gt=0)


class VerifierSpec(BaseModel):
    """The rule that scores the submitted answer against the task's `answer`.

    `normalized`: `verifiers.text.normalized_match` (case, spacing, punctuation and confusables folded)
    against the task's reference or list of accepted references; `exact`: character for character after
    stripping; `numeric`: `verifiers.numeric.numeric_match` within `tolerance`.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["normalized", "exact", "numeric"] = "normalized"
    tolerance: float = Field(0.0, ge=0.0)


class McpManifest(BaseModel):
    """One MCP server as one gym environment, named `mcp_tools/<name>`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    description: Annotated[str, Field(min_length=1, max_length=500)]
    server: Annotated[StdioServer | HttpServer, Field(discriminator="transport")]
    dataset: Name = Field(description="the dataset folder under datasets/gym_datasets/ (train/validation)")
    system_prompt: str | None = None
    max_turns: int = Field(12, ge=1, le=256)
    verifier: VerifierSpec = Field(default_factory=VerifierSpec)


def load_manifest(path: Path) -> McpManifest:
    """Read and validate a manifest file.

    Raises:
        ValueError: the file is not JSON or does not validate (pydantic's error names the field).
    """
    return McpManifest.model_validate_json(path.read_text(encoding="utf-8"))
