"""The `mcp_tools/<name>` environments: an MCP server's tools as an episode's tools, one manifest each.

Each episode starts the manifest's MCP server inside the session's own sandbox (no network, the
sandbox's limits, the task's files in its work dir), connects with the `mcp` SDK's client, and offers
the model the server's tools (`tools/list`, their JSON schemas as OpenAI functions) plus
`submit_answer`. A tool call is one step forwarded to the server as `tools/call`, and its result is the
tool message stored in the transcript; what the server rejects (bad arguments, an unknown value) comes
back as its own error text and the episode goes on. `submit_answer` (or a plain assistant reply) ends
the episode and the manifest's rule scores the answer. A server that exits mid-episode ends it too,
stored with the failure class `sandbox_error`; close and the session TTL kill the server with its
sandbox.

Why an environment kind and not a protocol facade: `gym_server/protocols/` serves the gym *to* other
ecosystems; this runs another ecosystem's server *inside* the gym, registered like every environment
(the `mcp_tools` entry point, a family), with the gym's own sessions, sandboxes, store and verifiers.
"""

from __future__ import annotations

import importlib.util
import logging
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from gym_env_mcp_tools.manifest import HttpServer, McpManifest, StdioServer, load_manifest
from gym_server.core.errors import SandboxUnavailable
from gym_server.core.extras import EXTRA_OF_MODULE, MissingExtra
from gym_server.protocols.mcp.mapping import openai_function
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import content_hash
from gym_server.sdk.runtime import (
    FailureClass,
    Limits,
    SessionSandbox,
    SpawnedProcess,
    describe,
    session_sandbox,
)
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import TOOL_NAME, tool
from gym_verifiers.numeric import numeric_match
from gym_verifiers.result import VerifierResult
from gym_verifiers.text import exact_match, normalized_match

if TYPE_CHECKING:
    from gym_env_mcp_tools.connection import McpConnection

__all__ = ["MANIFESTS", "McpToolsEnv", "environments", "mcp_environment", "score_answer"]

log = logging.getLogger(__name__)

MANIFESTS = sorted(Path(__file__).resolve().parent.glob("*/manifest.json"))
"""The built-in manifests: one folder per example server (manifest, README, generator, fixtures)."""

Answer = str | list[str]


def score_answer(manifest: McpManifest, answer: Answer, submitted: str) -> VerifierResult:
    """Score a submitted answer against a task's reference (or accepted references) by the manifest's rule."""
    rule = manifest.verifier
    references = [answer] if isinstance(answer, str) else list(answer)
    if rule.kind == "numeric":
        return numeric_match(submitted, references[0], abs_tol=rule.tolerance, rel_tol=0.0)
    if rule.kind == "exact":
        return exact_match(submitted, references)
    return normalized_match(submitted, references)


class McpToolsEnv(Environment):
    """Base of the generated classes; `manifest` and the class facts come from one manifest file."""

    manifest: ClassVar[McpManifest]
    multi_turn = True
    reward_type = "binary: the answer matches by the manifest's rule"
    # its state is an MCP server in its own sandbox: a fork starts a fresh one and replays
    fork_mode = ForkMode.REPLAY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """`answer` is a reference or a list of accepted ones; `metadata.files` seeds the work dir."""
        check_task_field(str | list[str], task.answer, "answer")
        if isinstance(task.answer, list) and not task.answer:
            raise ValueError("answer: the list of accepted answers is empty")
        check_task_field(dict[str, str], task.metadata.get("files") or {}, "metadata.files")

    def reference_solution(self) -> list[dict[str, Any]]:
        """The (first accepted) reference as the final answer."""
        answer = self.task.answer
        return [{"role": "assistant", "content": answer if isinstance(answer, str) else answer[0]}]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sandbox: SessionSandbox | None = None
        self.process: SpawnedProcess | None = None
        self.connection: McpConnection | None = None
        self.mcp_tools: dict[str, dict[str, Any]] = {}
        self.submitted: str | None = None
        self.calls = 0
        self.server_failure: tuple[FailureClass, str] | None = None

    async def setup(self) -> None:
        """Connect to the server (a stdio server: started in the session's sandbox) and list its tools.

        Raises:
            SandboxUnavailable: no sandbox, or the server did not come up (503 naming why).
            SandboxesBusy: no room for another sandbox (429).
        """
        from gym_env_mcp_tools.connection import McpConnection, McpServerGone, http_streams

        server = self.manifest.server
        if isinstance(server, HttpServer):
            self.connection = McpConnection(transport=http_streams(server.url))
            hint = f"Is the MCP server at {server.url} up?"
        else:
            self.connection = McpConnection(await self._spawn(server))
            hint = (
                f"Its command ({describe(server.command)}) runs in the sandbox: is the server installed "
                "where sandboxes see it (GYM_SANDBOX__TOOLS_DIR)?"
            )
        try:
            await self.connection.start(server.startup_timeout_s)
        except McpServerGone as exc:
            raise SandboxUnavailable(f"environment {self.name!r}: {exc}. {hint}") from exc
        for definition in self.connection.tools:
            name = str(definition.get("name", ""))
            if name in self.tool_specs or not TOOL_NAME.match(name):
                log.warning(
                    "%s: MCP tool %r is not offered (a gym tool's name, or not a function name)",
                    self.name,
                    name[:80],
                )
                continue
            self.mcp_tools[name] = definition

    async def _spawn(self, server: StdioServer) -> SpawnedProcess:
        """Admit the session's sandbox, put the task's files in its work dir and start the server there."""
        limits = Limits(
            memory_mb=server.memory_mb,
            pids=server.pids,
            cpus=server.cpus,
            disk_mb=server.disk_mb,
            timeout_s=server.call_timeout_s,
        )
        self.sandbox = await session_sandbox(limits, session_id=self.task.id, egress=self.egress)
        sandbox = await self.sandbox.get()
        for name, text in (self.task.metadata.get("files") or {}).items():
            await sandbox.put_file(name, text)
        self.process = await sandbox.spawn(server.command, env=server.env)
        return self.process

    def tools(self) -> list[dict[str, Any]]:
        return [openai_function(definition) for definition in self.mcp_tools.values()] + super().tools()

    async def call_episode_tool(self, name: str, arguments: Any) -> str | None:
        """The server's tools go to the server (`submit_answer` is the SDK's own `@tool`)."""
        return await self._forward(name, arguments) if name in self.mcp_tools else None

    async def _forward(self, name: str, arguments: Any) -> str:
        """One `tools/call`; never raises: every outcome is the text of a tool message."""
        from gym_env_mcp_tools.connection import McpServerGone

        self.calls += 1
        try:
            parsed = orjson.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError as exc:
            return f"Error: arguments for {name!r} are not valid JSON ({exc})."
        if not isinstance(parsed, dict):
            return f"Error: arguments for {name!r} must be a JSON object, got {type(parsed).__name__}."
        if self.connection is None or self.server_failure:
            return "Error: the MCP server is not running."
        timeout_s = self.manifest.server.call_timeout_s
        # A sandboxed server's failure is the sandbox's; a remote one's, the environment's.
        remote = isinstance(self.manifest.server, HttpServer)
        try:
            return await self.connection.call(name, parsed, timeout_s)
        except TimeoutError:
            # The call may still run and change the server's state later: the episode is no clean
            # signal any more, so it ends here and the server goes with the sandbox at close.
            detail = f"tool {name!r} did not answer within {timeout_s:g} s"
            failure = FailureClass.ENV_ERROR if remote else FailureClass.SANDBOX_TIMEOUT
            self.server_failure = (failure, detail)
            self.finish("mcp_server_timeout")
            return f"Error: {detail}. The episode ends."
        except McpServerGone as exc:
            failure = FailureClass.ENV_ERROR if remote else FailureClass.SANDBOX_ERROR
            self.server_failure = (failure, str(exc))
            self.finish("mcp_server_exited")
            return f"Error: {exc}. The episode ends."

    @tool
    async def submit_answer(self, answer: str) -> str:
        """Submit the final answer and end the episode.

        Args:
            answer: the answer alone, in the form the task asks for.
        """
        self.submitted = answer
        self.finish("submitted")
        return "Answer recorded."

    async def verify(self) -> VerifyResult:
        if self.server_failure is not None:
            failure, detail = self.server_failure
            return VerifyResult(reward=0.0, failure=failure, info={"error": detail, "tool_calls": self.calls})
        through_tool = self.submitted is not None
        response = self.submitted if self.submitted is not None else self.final_answer()
        result = score_answer(self.manifest, self.task.answer, response)
        return result.to_verify_result(
            components={"submitted": float(through_tool), "tool_calls": float(self.calls)},
            info={"answer": response[:200], "server": self.connection.server_info if self.connection else {}},
        )

    async def close(self) -> None:
        try:
            if self.connection is not None:
                await self.connection.close()
            if self.process is not None:
                await self.process.kill()
        finally:
            if self.sandbox is not None:
                await self.sandbox.close()


@cache
def mcp_environment(manifest_path: Path) -> type[McpToolsEnv]:
    """The environment class of one manifest, named `mcp_tools/<manifest name>` (one per path per process).

    An MCP server of your own becomes an environment by a manifest and a dataset: advertise
    `lambda: [mcp_environment(Path(...))]` under the `gym_server.environments` entry points.

    Raises:
        ValueError: the manifest does not validate.
    """
    manifest = load_manifest(manifest_path)
    beside = manifest_path.parent / manifest.dataset  # a manifest installed outside the gym keeps it here
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": f"McpToolsEnv_{manifest.name.replace('-', '_').replace('.', '_')}",
        "__doc__": manifest.description,
        "manifest": manifest,
        "name": f"mcp_tools/{manifest.name}",
        "description": manifest.description,
        "max_turns": manifest.max_turns,
        "dataset_name": manifest.dataset,
        "dataset_dir": beside if beside.is_dir() else None,
        "system_prompt": manifest.system_prompt,
        "verifier_version": content_hash([Path(__file__), manifest_path]),
        "egress": tuple(manifest.server.egress) if isinstance(manifest.server, StdioServer) else (),
    }
    return type(namespace["__qualname__"], (McpToolsEnv,), namespace)


def environments() -> list[type[McpToolsEnv]]:
    """The entry point: one class per built-in manifest.

    Raises:
        MissingExtra: the `mcp` SDK is not installed (the registry records it, to name the extra).
    """
    if importlib.util.find_spec("mcp") is None:
        raise MissingExtra("mcp", EXTRA_OF_MODULE["mcp"], "the mcp_tools/* family")
    return [mcp_environment(path) for path in MANIFESTS]
