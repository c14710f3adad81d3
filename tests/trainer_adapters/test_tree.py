"""Tree groups (`trainer_adapters.tree`): one root episode, continuations forked from chosen turns, against
an in-process gym with a token policy whose every turn is known. Each branch's columns are exact (the
root's tokens up to the branch point verbatim, then its own, the whole decoding to its transcript), the
prefix is sampled once, the gym stores each fork's own turns with its lineage, and the samples say where
they branch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ServerProcess
from trainer_adapters.test_driver import assert_token_invariants

from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient
from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver
from gym_trainer.samplers.base import SamplingParams, TokenSample
from gym_trainer.toolcalls import render_tool_call
from gym_trainer.tree import TreeShape, run_tree, tree_costs
from gym_trainer.trl import GymRolloutFunc, gym_prompt


class TurnPolicy:
    """Answers turn t (the tool calls in the prompt it is given) with `turns[t]`, whatever the episode: so
    concurrent branches get the same answers in any order. Logprob -0.5 on every sampled token."""

    token_exact = True
    weight_version: str | None = "turns-1"

    def __init__(self, tokenizer: Any, turns: Sequence[str]) -> None:
        self.tokenizer, self.turns = tokenizer, list(turns)
        self.eos = int(tokenizer.eos_token_id)
        self.base: int | None = None
        self.sampled = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "turns", "model": "turns", "weight_version": self.weight_version}

    async def aclose(self) -> None:
        return None

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        calls = self.tokenizer.decode(list(prompt_ids)).count("<tool_call>")
        self.base = calls if self.base is None else self.base
        turn = calls - self.base  # one tool call per assistant turn so far
        ids = [*self.tokenizer.encode(self.turns[turn], add_special_tokens=False), self.eos]
        self.sampled += len(ids)
        return TokenSample(ids, [-0.5] * len(ids), "stop")


async def test_a_tree_group_shares_its_prefix_and_each_branch_is_exact(
    gym_client: GymClient, renderer: ChatRenderer, tiny_tokenizer: Any
) -> None:
    turns = [
        render_tool_call("read", {}),
        render_tool_call("add", {"amount": 1}),
        render_tool_call("add", {"amount": 2}),
        render_tool_call("submit", {}),
    ]
    policy = TurnPolicy(tiny_tokenizer, turns)
    config = DriverConfig(
        max_completion_tokens=4096, max_turns=8, sampling=SamplingParams(seed=3), run="tree"
    )
    driver = RolloutDriver(gym_client, policy, renderer, config)
    spec = EpisodeSpec("counter", "counter-0000", seed=0)
    samples = await run_tree(driver, gym_client, spec, 4, TreeShape(turns=(1, 2, 2)))
    root, *forks = samples
    assert root.stop_reason == "done" and root.num_turns == 4 and root.branch_turn is None
    assert [fork.branch_turn for fork in forks] == [1, 2, 2]
    for fork in forks:
        assert fork.parent_session_id == root.session_id and fork.fork_mode == "copy"  # counter's
        cut, turn = fork.branch_token, fork.branch_turn
        assert turn is not None and cut == root.turn_starts[turn]
        assert fork.prompt_ids == root.prompt_ids
        assert fork.completion_ids[:cut] == root.completion_ids[:cut]  # the prefix, verbatim
        assert fork.logprobs[:cut] == root.logprobs[:cut] and fork.env_mask[:cut] == root.env_mask[:cut]
        assert_token_invariants(fork, renderer)  # the whole sample decodes to its own transcript
        # Same turns from the same state: each branch ends as the root did.
        assert fork.completion_ids == root.completion_ids and fork.reward == root.reward
        assert fork.stop_reason == "done" and fork.num_turns == 4
    # The prefix is sampled once: the forks generated only their own turns.
    costs = tree_costs(samples)
    assert policy.sampled == costs["generated_tokens"]
    assert costs["generated_tokens"] == root.model_tokens + sum(
        sum(fork.env_mask[fork.branch_token :]) for fork in forks
    )
    # Two fork requests (turn 1: one fork, turn 2: two), each replayed once on the server and copied.
    assert costs["env_steps"] == 4 + 3 + 2 + 2 and costs["replayed_steps"] == 1 + 2
    # The gym stored each fork with its lineage and only its own turns' tokens.
    assert forks[0].session_id is not None
    stored = await gym_client.wait_for_rollout(forks[0].session_id)
    assert stored["parent_id"] == root.session_id and stored["parent_turn"] == 1
    assert [turn["turn"] for turn in stored["turns"]] == [1, 2, 3]
    own = [token for turn in stored["turns"] for token in turn["env_ids"] + turn["completion_ids"]]
    first_env = len(stored["turns"][0]["env_ids"])
    assert own == forks[0].completion_ids[forks[0].branch_token - first_env :]


@pytest.mark.slow
def test_rollout_func_samples_groups_as_trees(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, tiny_tokenizer: Any
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    turns = [
        render_tool_call("read", {}),
        render_tool_call("add", {"amount": 1}),
        render_tool_call("submit", {}),
    ]
    policy = TurnPolicy(tiny_tokenizer, turns)
    rollout = GymRolloutFunc(server.url, sampler=policy, max_turns=4, tree=TreeShape(turns=(1, 2)))
    prompt = gym_prompt("counter", "Bring the counter to 26, then submit.", task_id="counter-0000", seed=0)
    args = SimpleNamespace(max_completion_length=4096, temperature=1.0, top_p=1.0)
    trainer = SimpleNamespace(
        args=args, state=SimpleNamespace(global_step=1), processing_class=tiny_tokenizer
    )
    out = rollout([prompt] * 3, trainer)
    root, *forks = rollout.last_rollouts
    assert out["gym_parent_session_id"] == [None, root.session_id, root.session_id]
    assert out["gym_branch_turn"] == [None, 1, 2]
    assert out["gym_branch_token"] == [None, root.turn_starts[1], root.turn_starts[2]]
    for column in ("completion_ids", "logprobs", "env_mask"):
        assert out[column][1] == out[column][2] == out[column][0]  # same turns from the same state
    assert policy.sampled == root.model_tokens + sum(f.generated_tokens for f in forks)
    rollout.close()
