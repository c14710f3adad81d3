"""verl's real agent-loop machinery plays gym episodes: `GymAgentLoop` built as verl's worker builds it
(hydra, from examples/verl/agent_loop.yaml), sampling through `CpuServerManager` (a real tiny model, in
place of verl's GPU-only server manager), against real `gym-server serve` processes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import Gym
from cpu_server_manager import CpuServerManager
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from gym_trainer.chat import ChatRenderer
from gym_trainer.verl.sampler import TokenizerMismatch

pytestmark = pytest.mark.anyio

COUNTER = {"gym_env": "counter", "gym_task_id": "counter-0000", "gym_seed": 0}


def counter_script(text: str) -> str:
    """Solve `counter`: read the value, add what is missing, submit (the prompt names the target)."""
    target = int(re.findall(r"Bring the counter to (\d+)", text)[0])
    replies = re.findall(r"<tool_response>\n?(.*?)\n?</tool_response>", text, re.S)
    if not replies:
        return '<tool_call>\n{"name": "read", "arguments": {}}\n</tool_call>'
    if replies[-1].strip().lstrip("-").isdigit():
        amount = target - int(replies[-1])
        return (
            f'<tool_call>\n{{"name": "add", "arguments": {{"amount": {amount}}}}}\n</tool_call>\n'
            '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
        )
    return "I am done."


def model_logprobs(model: Any, ids: list[int], start: int) -> list[float]:
    """The model's own log-probability of every token of `ids` from position `start` (temperature 1)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    scores = torch.log_softmax(logits, dim=-1)
    return [float(scores[i - 1, ids[i]]) for i in range(start, len(ids))]


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values."""
    runs: list[tuple[int, int, int]] = []
    for i, value in enumerate(mask):
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1], i + 1)
        else:
            runs.append((value, i, i + 1))
    return runs


async def play(loop: Any, info: dict[str, Any], temperature: float = 1.0) -> AgentLoopOutput:
    params = {
        "temperature": temperature,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "logprobs": True,
    }
    return await loop.run(params, raw_prompt=[{"role": "user", "content": "play"}], extra_info=info)


async def test_counter_episode_is_token_exact_and_scored_like_its_stored_trajectory(
    gym: Gym, tiny: tuple[Any, Any], agent_loop: Callable[..., Any]
) -> None:
    tokenizer, model = tiny
    server = CpuServerManager(model, tokenizer, script=counter_script)
    output = await play(agent_loop(server, tokenizer, gym.url), COUNTER)

    fields = output.extra_fields
    assert fields["gym_failure"] is None and fields["gym_no_signal"] is False, fields
    stored = gym.stored(fields["gym_session_id"], "completed")
    assert output.reward_score == stored["reward"] == 1.0
    assert len(server.calls) == 2  # read, then add + submit: two model turns, one environment reply

    # prompt + response == the gym's opening messages rendered, then model turns and environment replies
    renderer = ChatRenderer(tokenizer)
    opening = [m for m in stored["messages"] if m["role"] in ("system", "user")]
    assert output.prompt_ids == renderer.render_prompt(opening, stored["tools"]).ids
    runs = spans(output.response_mask)
    assert [value for value, _, _ in runs] == [1, 0, 1]
    model_runs = [output.response_ids[a:b] for value, a, b in runs if value == 1]
    assert model_runs == [call["token_ids"] for call in server.calls]
    tool_replies = [m for m in stored["messages"] if m["role"] == "tool"][:1]
    _, start, end = runs[1]
    assert output.response_ids[start:end] == renderer.render_delta(tool_replies).ids
    # each model turn was generated from exactly the tokens before it
    assert server.calls[1]["prompt_ids"] == output.prompt_ids + output.response_ids[: runs[2][1]]

    # logprobs: the model's own on its tokens, 0.0 on the environment's
    full = output.prompt_ids + output.response_ids
    expected = model_logprobs(model, full, len(output.prompt_ids))
    assert output.response_logprobs is not None
    for i, (mask, logprob) in enumerate(zip(output.response_mask, output.response_logprobs, strict=True)):
        assert logprob == (pytest.approx(expected[i], abs=1e-4) if mask else 0.0)


async def test_free_sampling_keeps_mask_and_logprobs_aligned(
    gym: Gym, tiny: tuple[Any, Any], agent_loop: Callable[..., Any]
) -> None:
    tokenizer, model = tiny
    server = CpuServerManager(model, tokenizer)
    output = await play(agent_loop(server, tokenizer, gym.url, max_tokens_per_turn=24), COUNTER)
    assert output.extra_fields["gym_failure"] is None, output.extra_fields
    # a random model rarely ends its turn within 24 tokens: a cut turn closes the episode unfinished
    status = "completed" if output.extra_fields["gym_stop_reason"] == "done" else "abandoned"
    stored = gym.stored(output.extra_fields["gym_session_id"], status)
    assert output.reward_score == stored["reward"]
    n = len(output.response_ids)
    assert len(output.response_mask) == len(output.response_logprobs or []) == n
    assert sum(output.response_mask) == sum(len(call["token_ids"]) for call in server.calls)
    expected = model_logprobs(model, output.prompt_ids + output.response_ids, len(output.prompt_ids))
    got = [lp for lp, m in zip(output.response_logprobs or [], output.response_mask, strict=True) if m]
    assert got == pytest.approx(
        [e for e, m in zip(expected, output.response_mask, strict=True) if m], abs=1e-4
    )


async def test_a_gym_killed_mid_episode_gives_no_signal_and_the_batch_goes_on(
    gym: Gym, gym_with: Callable[..., Gym], tiny: tuple[Any, Any], agent_loop: Callable[..., Any]
) -> None:
    tokenizer, model = tiny
    doomed = gym_with()

    def kill_after_first_turn(text: str) -> str:
        if "<tool_response>" in text:  # the first reply came back: the gym dies before the next step
            doomed.process.kill()
            doomed.process.wait()
        return counter_script(text)

    dying = agent_loop(
        CpuServerManager(model, tokenizer, script=kill_after_first_turn), tokenizer, doomed.url
    )
    healthy = agent_loop(CpuServerManager(model, tokenizer, script=counter_script), tokenizer, gym.url)
    lost, scored = await asyncio.gather(play(dying, COUNTER), play(healthy, COUNTER))

    assert lost.extra_fields["gym_failure"] == "gym_error"
    assert lost.extra_fields["gym_no_signal"] is True
    assert lost.reward_score is None  # no signal, never 0
    assert set(lost.response_mask) == {0}  # no token of it can reach the policy loss
    assert len(lost.response_ids) == len(lost.response_mask) == len(lost.response_logprobs or [])
    assert scored.reward_score == 1.0 and scored.extra_fields["gym_no_signal"] is False


async def test_a_gym_that_never_answers_still_gives_a_row(
    tiny: tuple[Any, Any], agent_loop: Callable[..., Any]
) -> None:
    from conftest import free_port

    tokenizer, model = tiny
    loop = agent_loop(CpuServerManager(model, tokenizer), tokenizer, f"http://127.0.0.1:{free_port()}")
    output = await play(loop, COUNTER)
    assert output.extra_fields["gym_failure"] == "gym_error" and output.reward_score is None
    assert output.prompt_ids and output.response_mask == [0] and output.response_ids


async def test_a_tokenizer_that_is_not_the_served_models_is_a_clear_error(
    gym: Gym, tiny: tuple[Any, Any], agent_loop: Callable[..., Any]
) -> None:
    from gym_trainer.models import build_tiny_model

    tokenizer, _ = tiny

    class Bigger:  # the served model's vocabulary: the trainer's tokenizer plus 40 ids it lacks
        eos_token_id, pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id

        def __len__(self) -> int:
            return len(tokenizer) + 40

    class OtherModel(CpuServerManager):
        async def generate(self, request_id: str, **kwargs: Any) -> Any:
            output = await super().generate(request_id, **kwargs)
            output.token_ids[0] = len(tokenizer) + 7  # an id only the served model has
            return output

    served = OtherModel(build_tiny_model(Bigger()), tokenizer)
    loop = agent_loop(served, tokenizer, gym.url, max_tokens_per_turn=4)
    with pytest.raises(TokenizerMismatch, match=r"outside the tokenizer's vocabulary of 291"):
        await play(loop, COUNTER)
