"""TRL's `environment_factory` backed by gym sessions: the TRL-native alternative to `rollout_func`.

`GRPOTrainer(..., environment_factory=make_environment_factory(url, "counter"))` follows TRL 1.16's
contract: the trainer builds one instance per rollout slot (pooled and reused across batches), lists
the class's public functions as tools (rendered into the prompt through transformers'
`get_json_schema`, so each method gets a signature, type hints and a Google docstring built from the
gym's JSON schema), runs its own tool loop (generate, parse the calls with the tokenizer's response
template, call the methods, append their replies), and

- calls `reset(**row)` with the dataset row's columns before each generation: it opens a session for
  the row's task (`gym_task`, `gym_task_id`/`task_id`, `gym_seed`/`seed`, as columns or in the first
  prompt message as `gym_prompt` writes them) and returns None, so the dataset's prompt is used as is;
- calls `get_reward()` once per finished rollout, as a reward source of its own (weight 1, logged under
  the class name): it verifies the session and closes it; None (no signal) when the gym failed, which
  TRL turns into NaN and leaves out of the group's baseline.

Each tool method steps the session with one assistant tool call and returns the environment's reply
text. The rollouts of a GRPO group share their row, hence their task and gym seed (a task without a seed
starts from its own fixed state), so they start alike.

What this path gives up compared with `GymRolloutFunc`: TRL tokenizes and templates itself, so the gym
stores the transcript but no token data; each tool call is its own gym step; the prompt is the dataset's
(give the rows the environment's system prompt if the model should see it). TRL parses tool calls with
the tokenizer's response template, which it sets itself for the chat templates it knows (Qwen, Llama,
...); `use_hermes_response_template` sets it for the gym's `HERMES_TEMPLATE` (tiny model, SmolLM2). Use
this path for TRL's tool loop; use `GymRolloutFunc` for token-exact multi-turn training.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import uuid
from collections.abc import Callable
from typing import Any

from gym_trainer.chat import HERMES_TEMPLATE
from gym_trainer.client import GymClientError, SyncGymClient

__all__ = ["GymToolEnvironment", "make_environment_factory", "use_hermes_response_template"]

_JSON_TYPES: dict[str, Any] = {
    "integer": int,
    "number": float,
    "string": str,
    "boolean": bool,
    "array": list,
    "object": dict,
}
_RESERVED = frozenset({"reset", "get_reward"})


class GymToolEnvironment:
    """One rollout's gym session. Subclasses made by `make_environment_factory` add the tool methods."""

    _gym: SyncGymClient
    _env: str = ""
    _run: str | None = None
    _seed: int | None = None

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.done = False
        self.failure: str | None = None  # set when the gym failed this rollout: it gives no signal
        self.messages: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(session={self.session_id}, done={self.done}, failure={self.failure})"

    def reset(self, **row: Any) -> str | None:
        """Open a session for the row's task; returns None, so the dataset's prompt is used as is. A gym
        that cannot open it does not stop training: the rollout's tools answer with the error and its
        reward is None."""
        self._close()
        self.done, self.failure, self.messages = False, None, []
        task_id, task, seed = _task_of(row)
        try:
            session = self._gym.create_session(
                self._env,
                task_id=task_id,
                task=task,
                seed=seed if seed is not None else self._seed,
                run=self._run,
            )
        except GymClientError as exc:
            self.failure = f"gym_error: {exc}"
            return None
        self.session_id = session.session_id
        self.messages = list(session.messages)
        return None

    def get_reward(self) -> float | None:
        """The gym's verdict on the episode, then close it; None when there is no signal (the gym
        failed, or the verifier did)."""
        if self.session_id is None or self.failure is not None:
            self._close()
            return None
        try:
            verdict = self._gym.verify(self.session_id)
        except GymClientError as exc:
            self.failure = f"gym_error: {exc}"
            return None
        finally:
            self._close()
        return None if verdict.failure else verdict.reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.failure is not None:
            return f"error: the gym failed this episode ({self.failure})"
        if self.session_id is None:
            return "error: no episode is running (reset was not called)"
        if self.done:
            return "error: the episode is over"
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        try:
            result = self._gym.step(self.session_id, message)
        except GymClientError as exc:  # the session is gone (expired, lost) or the gym is unreachable
            self.done, self.failure = True, f"gym_error: {exc}"
            return f"error: {exc}"
        self.done = result.done
        self.messages += [message, *result.messages]
        return "\n".join(str(m.get("content") or "") for m in result.messages)

    def _close(self) -> None:
        if self.session_id is not None:
            with contextlib.suppress(GymClientError):  # already closed, expired or unreachable
                self._gym.close(self.session_id)
            self.session_id = None


def _task_of(row: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None, int | None]:
    """The row's task: `gym_task` (JSON text or a dict), `gym_task_id` or `task_id`, and `gym_seed` or
    `seed`, read from the row's columns or from the first prompt message (where `gym_prompt` puts them)."""
    prompt = row.get("prompt")
    first = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) else {}

    def pick(*keys: str) -> Any:
        for source in (row, first):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
        return None

    task = pick("gym_task")
    task_id = pick("gym_task_id", "task_id")
    seed = pick("gym_seed", "seed")
    parsed = json.loads(task) if isinstance(task, str) else task
    if parsed is None and task_id is None:
        raise ValueError(
            "the dataset row names no gym task: give it a gym_task or task_id column, or a gym_prompt prompt"
        )
    return (None if parsed is not None else task_id), parsed, (int(seed) if seed is not None else None)


def _python_type(schema: dict[str, Any]) -> Any:
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if kinds else "string"
    base = _JSON_TYPES.get(str(kind), str)
    if base is list and isinstance(schema.get("items"), dict):
        return list[_python_type(schema["items"])]  # type: ignore[misc]
    return base


def tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method with the signature, hints and docstring transformers needs to rebuild `schema`."""
    function = schema.get("function", schema)
    name = str(function["name"])
    if name in _RESERVED or name.startswith("_") or not name.isidentifier():
        raise ValueError(f"gym tool {name!r} cannot be a TRL environment method")
    parameters = function.get("parameters") or {}
    properties: dict[str, dict[str, Any]] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])

    def method(self: GymToolEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    lines = (
        [str(function.get("description") or name), "", "Args:"]
        if properties
        else [str(function.get("description") or name)]
    )
    for arg in sorted(properties, key=lambda a: a not in required):
        spec = properties[arg]
        hint = _python_type(spec)
        default = inspect.Parameter.empty if arg in required else None
        signature.append(
            inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hint)
        )
        hints[arg] = hint if arg in required else hint | None
        text = str(spec.get("description") or arg).replace("\n", " ")
        if isinstance(spec.get("enum"), list):
            text += f" (choices: {json.dumps(spec['enum'])})"
        lines.append(f"    {arg}: {text}")
    hints["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__annotations__ = hints
    method.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    return method


def make_environment_factory(
    gym_url: str | list[str],
    env: str,
    *,
    run: str | None = None,
    seed: int | None = None,
    api_key: str | None = None,
) -> Callable[[], GymToolEnvironment]:
    """A zero-argument factory for TRL, with one method per tool of `env` (from the gym's catalog);
    `api_key`: the gym's key, when it requires one (default `$GYM_API_KEY`)."""
    gym = SyncGymClient(gym_url, api_key=api_key)
    info = gym.get_environment(env)
    namespace: dict[str, Any] = {"_gym": gym, "_env": env, "_run": run, "_seed": seed}
    for schema in info.tools:
        method = tool_method(schema)
        namespace[method.__name__] = method
    cls = type(
        f"Gym{env.title().replace('_', '').replace('/', '')}Environment", (GymToolEnvironment,), namespace
    )
    return cls


def use_hermes_response_template(tokenizer: Any) -> Any:
    """Let TRL parse the tool calls of a tokenizer whose chat template is the gym's `HERMES_TEMPLATE`.

    TRL reads tool calls with `tokenizer.parse_response`, driven by a response template it sets only for
    chat templates it recognises; for any other it raises "Unrecognized chat template". `HERMES_TEMPLATE`
    writes calls as Qwen2.5 does (`<tool_call>` JSON blocks in a ChatML assistant turn), so TRL's own
    Qwen response template reads them. Returns the tokenizer; refuses another chat template."""
    if tokenizer.chat_template != HERMES_TEMPLATE:
        raise ValueError(
            "use_hermes_response_template needs a tokenizer with the HERMES_TEMPLATE chat template"
        )
    from trl.chat_template_utils import qwen3_template

    tokenizer.response_template = qwen3_template
    return tokenizer
