"""What a trajectory row can keep beyond JSON itself, checked when an episode is created.

The JSON of every body is checked where it is parsed (`gym_server.core.jsontext`); what is left are the
limits of the row's plain columns and of the database's own reading of the policy, which hold for every
way an episode starts (the sessions API, `POST /v1/rollouts`, the MCP, OpenEnv and NeMo Gym facades):

- a name (run, task id, the policy's `model`, `metadata.buffer_group`) is at most `NAME_MAX_CHARS`
  characters without control characters: PostgreSQL's `VARCHAR(255)` refuses longer ones and its
  `text` refuses NUL;
- the policy holds no NUL character anywhere: PostgreSQL reads its `model` with `->>` (the per-task
  totals and the inspector's index), which refuses a `\\u0000` escape anywhere in the document.

Such a value was accepted with a 201 before and the row was refused afterwards; now it is a 422 before
anything is applied. Transcripts, `metadata` and turn data may hold NUL: they are stored as JSON text.
"""

from __future__ import annotations

import re
from typing import Any

from gym_server.core.errors import InvalidRequest
from gym_server.store.records import BUFFER_GROUP_KEY, NAME_MAX_CHARS

__all__ = ["check_episode", "name_problem"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_episode(
    *, run: str | None, task_id: str, policy: dict[str, Any] | None, metadata: dict[str, Any] | None = None
) -> None:
    """Raise `InvalidRequest` (422) if the row of an episode with these values could not be stored."""
    for field, name in (("run", run), ("task id", task_id)):
        if name is not None and (problem := name_problem(field, name)):
            raise InvalidRequest(problem)
    group = (metadata or {}).get(BUFFER_GROUP_KEY)
    if group is not None:  # a name column of its own (`buffer_group`)
        if not isinstance(group, str):
            kind = type(group).__name__
            raise InvalidRequest(
                f"metadata.{BUFFER_GROUP_KEY} is a rollout-buffer group's id, a string; got {kind}"
            )
        if problem := name_problem(f"metadata.{BUFFER_GROUP_KEY}", group):
            raise InvalidRequest(problem)
    if policy is None:
        return
    model = policy.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise InvalidRequest(f"policy.model is the model's name, a string; got {type(model).__name__}")
        if problem := name_problem("policy.model", model):
            raise InvalidRequest(problem)
    if _holds_nul(policy):
        raise InvalidRequest("policy holds a NUL character (\\u0000), which the trajectory store cannot keep")


def name_problem(field: str, name: str) -> str | None:
    """Why the store could not keep `name` in a name column, or None when it can."""
    if len(name) > NAME_MAX_CHARS:
        return f"{field} is {len(name)} characters long, over the store's {NAME_MAX_CHARS}"
    if not (name.isascii() and name.isprintable()) and _CONTROL.search(name):  # ASCII: printable = none
        return f"{field} holds a control character, which the store cannot keep"
    return None


def _holds_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item)  # keys: PostgreSQL reads them too
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
