"""examples/verl: the dataset script's rows from a real gym are what `GymAgentLoop` and the reward
functions read, and the agent-loop config registers the loop under the name the rows give."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import AGENT_LOOP_YAML, Gym
from omegaconf import OmegaConf

from gym_trainer.verl.agent_loop import AGENT_NAME, episode_spec
from gym_trainer.verl.reward import verify_request

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "make_dataset.py"


def test_dataset_rows_name_gym_tasks_for_the_loop_and_the_reward(gym: Gym) -> None:
    spec = importlib.util.spec_from_file_location("make_dataset", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.rows(gym.url, "counter", "validation")
    assert rows and all(row["agent_name"] == AGENT_NAME for row in rows)
    first = rows[0]
    episode = episode_spec(first["extra_info"], None)
    assert (episode.env, episode.task_id) == ("counter", first["reward_model"]["ground_truth"])
    body = verify_request("done", first["reward_model"]["ground_truth"], first["extra_info"], None)
    assert body["task_id"] == episode.task_id
    (entry,) = OmegaConf.load(AGENT_LOOP_YAML)
    assert entry.name == AGENT_NAME
