"""The `Environment` base class: what an environment author writes, and the turn engine around it.

An environment instance lives for one episode. The server builds it from a task and a seed, calls
`reset()` for the opening messages, `step()` once per assistant message, `verify()` for the reward and
`close()` at the end. Authors usually write tools (`@tool` methods), a `verify()`, and perhaps `setup()`
for per-episode state or `respond()` for user turns; the engine here handles tool dispatch, tool-call
ids, turn counting and the end of the episode, identically for the HTTP server, replayed stateless
verification and the CLI's `play`.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import random
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_server.core.egress_policy import parse_rule
from gym_server.core.errors import EnvironmentDefinitionError, InvalidRequest
from gym_server.sdk.messages import tool_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.tasks import Dataset, Task, TaskFieldError, field_errors
from gym_server.sdk.tools import ToolSpec

__all__ = ["Environment", "ForkMode", "StepOutcome", "VerifyResult"]


class VerifyResult(BaseModel):
    """A reward with its named components; `failure` marks a score that must not be trained on."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    components: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    failure: str | None = Field(None, description="failure class, e.g. judge_failed or verify_timeout")


class ForkMode(StrEnum):
    """How an episode of an environment is forked at a turn (`POST /v1/sessions/{id}/fork`, docs/fork.md).

    Whatever the mode, a fork starts from the state the original had after that turn; the mode says how
    the server gets there, and `gym-server env check` verifies the claim.
    """

    # `copy_state()` returns an independent instance in the same state: a live episode forked at its
    # current turn is copied, not replayed (an earlier turn, or a stored episode, is replayed once and
    # the result copied for every further fork).
    COPY = "copy"
    # Rebuilt by replaying the recorded assistant turns in a fresh instance (same task, seed and
    # version; a sandboxed one in a fresh sandbox), every observation compared with the recorded one:
    # a difference refuses the fork (409 `fork-diverged`) instead of forking silently wrong.
    REPLAY = "replay"
    # Cannot be forked (state outside the gym's control, such as a live remote service): 409.
    NONE = "none"


@dataclass(slots=True)
class StepOutcome:
    """What one assistant message produced."""

    messages: list[dict[str, Any]]
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Environment:
    """Base class of every environment. Subclass it, name it, give it tools and a verifier.

    Example:
        ```python
        from gym_server import Environment, VerifyResult, tool

        class Echo(Environment):
            name = "echo"
            description = "Say the secret word back."

            @tool
            async def secret(self) -> str:
                \"\"\"Return the secret word.\"\"\"
                return str(self.task.answer)

            async def verify(self) -> VerifyResult:
                said = self.final_answer().strip()
                return VerifyResult(reward=float(said == self.task.answer))
        ```

    Class attributes:
        name: the catalog name, also the default dataset folder under `datasets/gym_datasets/`.
        description: one line for the catalog.
        multi_turn: whether episodes take more than one assistant turn.
        max_turns: assistant turns before the episode ends with failure `max_turns` (None: server limit).
        dataset_name: dataset folder under `datasets/gym_datasets/` when it differs from `name`.
        dataset_dir: a dataset folder anywhere (third-party packages keep data beside their code).
        system_prompt: an optional system message opening every episode.
        verifier_version: set it to version the verifier by hand; by default it hashes `verify`'s source.
        native_task_form: one line describing the dataset's own record form that `task_from_record`
            accepts (e.g. HumanEval's), shown to clients whose inline task is refused.
        reward_type: one phrase saying what the reward is (`binary: all tests pass`, `partial credit
            0..1`), shown in the catalog of docs/environments.md.
        hedge_probe: False where a reply holding two tasks' reference answers is not a hedge (code: the
            other task's function is dead code), so `env check` does not play its hedging probe.
        egress: `host:port` entries the environment's sandboxes may reach through the gym's filtering
            proxy (`session_sandbox(..., egress=self.egress)`); empty (the default): no network at all.
            A non-public address (loopback, private, link-local) must be listed as that exact address.
        judge_rubric: the criteria an LLM judge scores this environment's answers by when the operator
            configured one (`GYM_JUDGE__URL`; `gym_verifiers.judging.judge_response`); None: never
            judged.
        fork_mode: how an episode is forked at a turn (`ForkMode`): `replay` (the default, checked turn
            by turn, so an environment that is not deterministic refuses rather than forks wrong),
            `copy` (`copy_state()` is exact and cheap) or `none`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    multi_turn: ClassVar[bool] = True
    max_turns: ClassVar[int | None] = None
    dataset_name: ClassVar[str | None] = None
    dataset_dir: ClassVar[Path | None] = None
    system_prompt: ClassVar[str | None] = None
    verifier_version: ClassVar[str | None] = None
    native_task_form: ClassVar[str | None] = None
    tool_specs: ClassVar[dict[str, ToolSpec]] = {}
    egress: ClassVar[tuple[str, ...]] = ()
    judge_rubric: ClassVar[str | None] = None
    reward_type: ClassVar[str] = ""
    hedge_probe: ClassVar[bool] = True
    fork_mode: ClassVar[ForkMode] = ForkMode.REPLAY

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for attribute in vars(klass).values():
                spec = getattr(attribute, "__gym_tool__", None)
                if isinstance(spec, ToolSpec):
                    specs[spec.name] = spec
        cls.tool_specs = specs

    def __init__(self, task: Task, seed: int | None = None) -> None:
        self.task = task
        self.seed = seed
        # Seeding from a string is stable across processes (it goes through SHA-512), unlike hash().
        self.rng = random.Random(f"{task.id}\x00{seed}")
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        self.done = False
        self.done_reason: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task.id!r}, seed={self.seed!r}, turns={self.turns})"

    # -- what authors override -------------------------------------------------------------------

    async def setup(self) -> None:
        """Build per-episode state from `self.task` and `self.rng`. Runs inside `reset()`."""

    def opening_messages(self) -> list[dict[str, Any]]:
        """The messages the episode starts with: the system prompt, then the task's prompt."""
        opening: list[dict[str, Any]] = []
        if self.system_prompt:
            opening.append({"role": "system", "content": self.system_prompt})
        if isinstance(self.task.prompt, str):
            opening.append({"role": "user", "content": self.task.prompt})
        else:
            opening.extend(dict(message) for message in self.task.prompt)
        return opening

    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas offered in this episode (OpenAI function format)."""
        return [spec.schema() for spec in self.tool_specs.values()]

    async def on_assistant(
        self, message: dict[str, Any], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """Answer one assistant message: run its tool calls, or hand a plain reply to `respond()`."""
        calls = message.get("tool_calls") or []
        if calls:
            return await self.run_tool_calls(
                calls, tool_timeout_s=tool_timeout_s, max_tool_calls=max_tool_calls
            )
        return await self.respond(message)

    async def respond(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Answer an assistant message without tool calls. By default it is the final answer.

        A multi-turn environment with a simulated user returns user messages here instead.
        """
        self.finish("answered")
        return []

    async def verify(self) -> VerifyResult:
        """Score the episode so far. Every environment must implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement verify()")

    async def close(self) -> None:
        """Release what the episode holds (a sandbox, files). Called exactly once."""

    async def copy_state(self) -> Self:
        """An independent instance in this one's state, for `fork_mode = ForkMode.COPY` (called between
        steps, never during one).

        The default deep-copies the instance, right for state that is plain Python (numbers, dicts,
        pydantic models, the seeded `rng`); override it when the state holds a handle a copy must not
        share (a sandbox, a file, a connection), or declare `ForkMode.REPLAY` instead. The copy runs in a
        worker thread: an episode's transcript may be megabytes, and the event loop serves others meanwhile
        (the instance is not stepped during it).
        """
        return await asyncio.to_thread(copy.deepcopy, self)

    # -- optional hooks for `gym-server env check` (docs/environments.md) -----------------------

    def reference_solution(self) -> list[dict[str, Any]] | None:
        """Assistant turns that solve this episode's task (called after `reset()`), or None: none known.

        `env check` plays them and requires full reward; it also builds its hedging probe from the
        final answer of two tasks' references. The turns may use what `setup()` built (the state a
        solver would have read through the tools).
        """
        return None

    def hack_probes(self) -> list[HackProbe]:
        """This environment's own reward hacks and sandbox attacks (called after `reset()`), each played
        by `env check` in a fresh episode of the same task and seed; none by default."""
        return []

    # -- the engine ------------------------------------------------------------------------------

    async def reset(self) -> list[dict[str, Any]]:
        """Start the episode; returns the opening messages (also the start of the transcript)."""
        await self.setup()
        opening = self.opening_messages()
        self.messages = [dict(message) for message in opening]
        return opening

    async def step(
        self, message: dict[str, Any], *, tool_timeout_s: float = 30.0, max_tool_calls: int = 32
    ) -> StepOutcome:
        """Take one assistant message (a plain dict in OpenAI form) and return the environment's replies."""
        if self.done:
            raise RuntimeError("step() on a finished episode")
        self.turns += 1
        for index, call in enumerate(message.get("tool_calls") or []):
            if not call.get("id"):
                call["id"] = f"call_{self.turns}_{index}"
        self.messages.append(message)
        replies = await self.on_assistant(
            message, tool_timeout_s=tool_timeout_s, max_tool_calls=max_tool_calls
        )
        self.messages.extend(replies)
        return StepOutcome(messages=replies, done=self.done, info={"turn": self.turns})

    async def run_tool_calls(
        self, calls: list[dict[str, Any]], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """Run tool calls in order; every call gets exactly one tool message back."""
        replies: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            function = call.get("function") or {}
            name = str(function.get("name", ""))
            spec = self.tool_specs.get(name)
            if index >= max_tool_calls:
                text = f"Error: not executed; at most {max_tool_calls} tool calls run per turn."
            elif spec is None:
                episode_text = await self.call_episode_tool(name, function.get("arguments", "{}"))
                if episode_text is None:
                    known = ", ".join(sorted(tool["function"]["name"] for tool in self.tools())) or "none"
                    episode_text = f"Error: unknown tool {name[:80]!r}; available tools: {known}."
                text = episode_text
            else:
                text, _ = await spec.invoke(self, function.get("arguments", "{}"), tool_timeout_s)
            replies.append(tool_message(str(call["id"]), name[:256], text))
        return replies

    async def call_episode_tool(self, name: str, arguments: Any) -> str | None:
        """Run a tool this episode offers beyond the class's `@tool` methods, or return None: no such tool.

        For tools known only once an episode runs (an MCP server's, listed by an overridden `tools()`):
        `arguments` is the call's raw `arguments` (JSON text or an object), the return value the tool
        message's text. It must not raise for what the tool does; a failure is text opening "Error:".
        """
        return None

    def finish(self, reason: str = "completed") -> None:
        """End the episode (a `submit` tool calls this). The reason is recorded with the trajectory."""
        if not self.done:
            self.done = True
            self.done_reason = reason

    def final_answer(self) -> str:
        """The content of the last assistant message, or '' when there is none."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                return str(message.get("content") or "")
        return ""

    # -- class-level facts -----------------------------------------------------------------------

    @classmethod
    def dataset(cls) -> Dataset:
        """The JSONL dataset behind this environment (cached per class)."""
        cached = cls.__dict__.get("_dataset_cache")
        if not isinstance(cached, Dataset):
            if cls.dataset_dir is not None:
                cached = Dataset(cls.dataset_dir.name, root=cls.dataset_dir.parent)
            else:
                cached = Dataset(cls.dataset_name or cls.name)
            cls._dataset_cache = cached  # type: ignore[attr-defined]
        return cached

    @classmethod
    def task_from_record(cls, record: dict[str, Any]) -> Task | None:
        """Turn a task in the dataset's own record form (as its users already hold it) into a `Task`.

        Override it, with `native_task_form`, when the environment's data has a published form (HumanEval's
        `{task_id, prompt, entry_point, test, canonical_solution}`). Return None when `record` is not in
        that form; raise `ValueError` (or `TaskFieldError`) naming the field when it is, but broken.
        """
        return None

    @classmethod
    def check_task(cls, task: Task) -> None:
        """Refuse a task this environment cannot run, before any episode starts. Runs on inline tasks.

        Override it to validate `task.answer` and `task.metadata` with `check_task_field`, so a client
        gets a 422 naming the field instead of a crash inside `setup()` or `verify()`.

        Raises:
            ValueError: a field is missing or malformed (`TaskFieldError` names it).
        """

    @classmethod
    def inline_task(cls, record: dict[str, Any]) -> Task:
        """The `Task` for a task sent inline (POST /v1/sessions, /v1/verify): the gym's form, else the
        dataset's own form (`task_from_record`), then `check_task`.

        Raises:
            InvalidRequest: neither form, or a field the environment refuses; the detail names the
                fields and shows the forms accepted.
        """
        try:
            try:
                task = Task.model_validate(record)
            except ValidationError as exc:
                native = cls.task_from_record(record)
                if native is None:
                    raise TaskFieldError(field_errors(exc)) from None
                task = native
            cls.check_task(task)
        except TaskFieldError as exc:
            raise cls._refused(exc.errors) from None
        except ValueError as exc:  # pydantic's ValidationError is one; so is a hook's own
            errors = field_errors(exc) if isinstance(exc, ValidationError) else [("", str(exc))]
            raise cls._refused(errors) from None
        return task

    @classmethod
    def _refused(cls, errors: list[tuple[str, str]]) -> InvalidRequest:
        located = [(f"task.{path}" if path else "task", problem) for path, problem in errors]
        forms = 'the gym\'s task form {"id", "prompt", "answer", "metadata"?}'
        if cls.native_task_form:
            forms += f" or {cls.native_task_form}"
        problems = "; ".join(f"{path}: {problem}" for path, problem in located[:5])
        return InvalidRequest(
            f"not a task environment {cls.name!r} can run: {problems}. Expected {forms}",
            errors=[{"loc": path, "msg": problem} for path, problem in located[:20]],
        )

    @classmethod
    def catalog_tools(cls) -> list[dict[str, Any]]:
        """Tool schemas shown in the catalog; environments whose tools vary by task may override."""
        return [spec.schema() for spec in cls.tool_specs.values()]

    @classmethod
    def resolved_verifier_version(cls) -> str:
        if cls.verifier_version:
            return cls.verifier_version
        try:
            source = inspect.getsource(cls.verify)
        except (OSError, TypeError):
            source = cls.verify.__qualname__
        return hashlib.sha256(source.encode()).hexdigest()[:12]

    @classmethod
    def check_definition(cls) -> None:
        """Fail loudly at registration, not at the first episode, when a class is malformed."""
        if not cls.name:
            raise EnvironmentDefinitionError(f"{cls.__qualname__} has no `name`")
        if cls.verify is Environment.verify:
            raise EnvironmentDefinitionError(f"environment {cls.name!r} does not implement verify()")
        if cls.max_turns is not None and cls.max_turns < 1:
            raise EnvironmentDefinitionError(f"environment {cls.name!r}: max_turns must be at least 1")
        if not isinstance(cls.fork_mode, ForkMode):
            raise EnvironmentDefinitionError(
                f"environment {cls.name!r}: fork_mode must be a ForkMode, got {cls.fork_mode!r}"
            )
        for entry in cls.egress:
            try:
                parse_rule(entry)
            except ValueError as exc:
                raise EnvironmentDefinitionError(f"environment {cls.name!r}: egress: {exc}") from None
