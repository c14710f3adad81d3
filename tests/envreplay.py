"""Replay an environment's golden transcripts: load `fixtures/golden.jsonl`, step messages, verify.

A golden row is `{name, kind, task_id, seed, messages, expected_reward, expected_components}`: the
assistant messages of one episode and the reward it must earn (`kind` is one of full, partial, zero,
malformed, hedged). Messages go through `Message` validation first, as the server would take them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gym_server.sdk.environment import Environment, VerifyResult
from gym_server.sdk.messages import Message

__all__ = ["REQUIRED_KINDS", "load_golden", "replay"]

REQUIRED_KINDS = {"full", "zero", "malformed", "hedged"}


def load_golden(path: Path) -> list[dict[str, Any]]:
    """The rows of a golden file, in order."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def replay(
    env_class: type[Environment], task_id: str, seed: int, messages: list[dict[str, Any]]
) -> VerifyResult:
    """Run one episode of `env_class` on a dataset task from the given assistant messages; its verdict."""
    task = env_class.dataset().get(task_id)
    assert task is not None, task_id
    env = env_class(task, seed)
    try:
        await env.reset()
        for message in messages:
            if env.done:
                break
            await env.step(Message.model_validate(message).to_dict())
        return await env.verify()
    finally:
        await env.close()
