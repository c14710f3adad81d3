"""The single-turn path: the gym's verifiers as verl custom reward functions, loaded the way verl
loads them (`load_extern_object` on `reward.custom_reward_function.path` and `.name`), against a real
gym. Single-turn rows name their task by `ground_truth` (a gym task id) and `data_source` (its env)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Gym
from verl.utils.import_utils import load_extern_object

from gym_trainer.verl.reward import NoSignal

PATH = "pkg://gym_trainer.verl.reward"
RIGHT = "(30+25)=55, 55*29=1595, minus 26 is 1569. \\boxed{1569}"  # math-00000's answer
FRACTION = "1/3 + 9/10 = 37/30, so \\boxed{\\frac{37}{30}}"  # math-00011's answer


def batch(gym: Gym, rows: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    score = load_extern_object(module_path=PATH, object_name="compute_score_batch")
    sources, solutions, truths, infos = zip(*[("math", s, t, i) for s, t, i in rows], strict=True)
    return score(
        data_sources=list(sources),
        solution_strs=list(solutions),
        ground_truths=list(truths),
        extra_infos=list(infos),
        gym_url=gym.url,
    )


def test_a_batch_is_scored_in_order(gym: Gym) -> None:
    scores = batch(
        gym,
        [
            (RIGHT, "math-00000", {}),
            ("\\boxed{7}", "math-00000", {}),
            (FRACTION, "", {"gym_task_id": "math-00011"}),
        ],
    )
    assert [s["score"] for s in scores] == [1.0, 0.0, 1.0]
    assert not any(s["gym_no_signal"] for s in scores)


def test_a_sample_the_gym_cannot_score_is_never_zero(gym: Gym) -> None:
    # the task does not exist: the gym refuses that item (not the batch), and with no scored sample of
    # the same task there is no neutral score for it, so the batch function raises instead of scoring 0
    unknown = {"gym_env": "math", "gym_task_id": "no-such-task"}
    with pytest.raises(NoSignal, match="task-not-found"):
        batch(gym, [(RIGHT, "math-00000", {}), ("x", "", unknown)])


@pytest.mark.anyio
async def test_the_one_sample_function_is_verls_async_reward(gym: Gym) -> None:
    score = load_extern_object(module_path=PATH, object_name="compute_score")
    result = await score(data_source="math", solution_str=RIGHT, ground_truth="math-00000", gym_url=gym.url)
    assert result == {"score": 1.0, "gym_no_signal": False, "gym_failure": None}
    with pytest.raises(NoSignal):
        await score(data_source="math", solution_str="x", ground_truth="no-such-task", gym_url=gym.url)
