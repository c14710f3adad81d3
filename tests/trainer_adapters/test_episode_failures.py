"""Bad input from either side ends the episode with a failure class, is retried only where that is
safe, and is counted in the summary: a policy that answers garbage, invalid tool-call JSON, endless
output or an empty completion, or dies mid-episode; a gym that answers 429 or restarts.

The policy is `FakeVLLM` (conftest: a vLLM stand-in, as no GPU is here; the real local policy server
never misbehaves on cue); the gym is real: in process, or a `gym-server serve` process where its
capacity limit or a restart is the point.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from conftest import ServerProcess
from gymtest import apoll, stored_run
from typer.testing import CliRunner

from gym_server.cli.rollouts import evaluate, rollout
from gym_trainer.chat import ChatRenderer
from gym_trainer.client import GymClient, RetryPolicy
from gym_trainer.driver import DriverConfig, EpisodeSpec, RolloutDriver, summarize
from gym_trainer.samplers import CompletionsSampler, SamplingParams, TokenSample
from gym_trainer.toolcalls import render_tool_call

BAD_TOOL_CALL = '<tool_call>{"name": "add", "arguments": {oops</tool_call>'

# One episode per validation task, played one at a time, so each consumes its own part of the script.
# (script entries, how the episode must end, its failure class, /v1/completions requests it may cost)
EPISODES: list[tuple[list[str], str, str | None, int]] = [
    (["!garbage"], "policy_error", "policy_error", 1),  # a 200 that is not JSON: not worth resending
    ([BAD_TOOL_CALL], "done", None, 1),  # sent as text, scored by the environment, counted
    (["!endless"], "max_completion_tokens", None, 1),  # cut at the budget, scored as it stands
    (["!empty"], "policy_error", "policy_error", 1),
    (["!503", "!503", render_tool_call("submit", {})], "done", None, 3),  # sampling is safe to resend
    (["!500", "!500", "!500"], "policy_error", "policy_error", 3),  # ... but only so often
    (["!oov"], "policy_error", "policy_error", 1),  # ids outside the vocabulary never reach a trainer
    (["!nan"], "policy_error", "policy_error", 1),
    (["!mismatch"], "policy_error", "policy_error", 1),
]


def table_value(output: str, label: str) -> str:
    match = re.search(rf"{re.escape(label)}\s*│\s*([^│]+?)\s*│", output)
    assert match, f"no {label!r} row in:\n{output}"
    return match.group(1)


@pytest.mark.slow
def test_each_bad_policy_answer_ends_its_episode_and_is_counted_by_eval(
    fake_vllm: Any, server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory(f"sqlite:///{tmp_path / 'gym.db'}", GYM_LOG_LEVEL="warning")
    server.start()
    fake_vllm.script = [entry for script, *_ in EPISODES for entry in script]
    out = tmp_path / "eval.jsonl"
    app = typer.Typer()
    app.command("eval")(evaluate)
    app.command("rollout")(rollout)
    args = ["eval", "counter", "--gym", server.url, "--policy", fake_vllm.url, "--model", "base"]
    args += ["--limit", str(len(EPISODES)), "--concurrency", "1", "--max-turns", "2", "--max-tokens", "16"]
    result = CliRunner().invoke(app, [*args, "--output", str(out), "--run", "bad-policy"])
    assert result.exit_code == 0, result.output

    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(r["stop_reason"], r["failure"]) for r in records] == [
        (stop, fail) for _, stop, fail, _ in EPISODES
    ]
    assert [r["parse_errors"] for r in records] == [int(script == [BAD_TOOL_CALL]) for script, *_ in EPISODES]
    assert all((r["reward"] is None) == (r["failure"] is not None) for r in records)  # no signal, not a zero
    assert len(fake_vllm.requests) == sum(cost for *_, cost in EPISODES) and not fake_vllm.script

    failed = sum(1 for *_, fail, _ in EPISODES if fail)
    assert table_value(result.output, "failures (no signal)") == str(failed)
    assert table_value(result.output, "tool-call parse errors") == "1"
    assert table_value(result.output, "scored (with signal)") == str(len(EPISODES) - failed)
    assert f"policy_error {failed}" in table_value(result.output, "endings")

    stored = stored_run(server.url, "bad-policy", len(EPISODES))
    by_id = {row["id"]: row for row in stored["items"]}
    for record in records:
        row = by_id[record["session_id"]]
        if record["failure"]:
            assert (row["status"], row["failure"]) == ("failed", "policy_error")
        else:
            assert row["reward"] == record["reward"]


async def test_a_policy_that_dies_mid_episode_fails_it_after_bounded_retries(
    fake_vllm: Any, gym_client: GymClient, renderer: ChatRenderer
) -> None:
    fake_vllm.script = [render_tool_call("read", {})]

    class DiesAfterOneAnswer(CompletionsSampler):
        async def sample(
            self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
        ) -> TokenSample:
            answer = await super().sample(prompt_ids, params, stop_token_ids)
            await asyncio.to_thread(fake_vllm.served.stop)
            return answer

    sampler = DiesAfterOneAnswer(fake_vllm.url, "base")
    driver = RolloutDriver(gym_client, sampler, renderer, DriverConfig(max_turns=4))
    rollout = await asyncio.wait_for(driver.run_episode(EpisodeSpec("counter", "counter-0000")), timeout=30)
    await sampler.aclose()
    assert (rollout.failure, rollout.stop_reason, rollout.reward) == ("policy_error", "policy_error", None)
    assert rollout.num_turns == 1 and "failed 3 times" in (rollout.error or "")
    stored = await gym_client.wait_for_rollout(rollout.session_id or "")
    assert (stored["status"], stored["failure"]) == ("failed", "policy_error")
    assert len(stored["turns"]) == 1  # the turn that reached the gym is kept
    assert summarize([rollout])["failures"] == 1


async def test_garbage_ids_and_empty_turns_end_in_policy_errors_in_process(
    fake_vllm: Any, gym_client: GymClient, renderer: ChatRenderer, scripted: Any
) -> None:
    """The in-process path of the TRL adapter: the driver's own checks, with a local tokenizer."""
    fake_vllm.script = ["!oov"]
    sampler = CompletionsSampler(fake_vllm.url, "base")
    oov = await RolloutDriver(gym_client, sampler, renderer).run_episode(
        EpisodeSpec("counter", "counter-0004")
    )
    await sampler.aclose()
    assert oov.failure == "policy_error" and "outside the vocabulary" in (oov.error or "")
    assert oov.completion_ids == []  # nothing of it reaches a trainer
    empty = await RolloutDriver(
        gym_client, scripted(renderer.tokenizer, [""], eos=False), renderer
    ).run_episode(EpisodeSpec("counter", "counter-0005"))
    assert empty.failure == "policy_error" and "empty completion" in (empty.error or "")
    for episode in (oov, empty):
        stored = await gym_client.wait_for_rollout(episode.session_id or "")
        assert (stored["status"], stored["failure"]) == ("failed", "policy_error")
    assert summarize([oov, empty])["stop_reasons"] == {"policy_error": 2}


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gym.db'}"


@pytest.mark.slow
async def test_a_gym_at_capacity_fails_the_episode_after_bounded_retries(
    server_factory: Callable[..., ServerProcess], sqlite_url: str, renderer: ChatRenderer, scripted: Any
) -> None:
    server = server_factory(sqlite_url, GYM_SESSIONS__MAX_SESSIONS="1", GYM_LOG_LEVEL="warning")
    server.start()
    retry = RetryPolicy(attempts=3, backoff_s=0.01, max_retry_after_s=0.05)
    sampler = scripted(renderer.tokenizer, [render_tool_call("submit", {})])
    async with GymClient(server.url, retry=retry) as gym:
        holder = await gym.create_session("counter", task_id="counter-0000")
        driver = RolloutDriver(gym, sampler, renderer, DriverConfig(run="at-capacity"))
        refused = await driver.run_episode(EpisodeSpec("counter", "counter-0001"))
        assert (refused.failure, refused.reward, refused.session_id) == ("gym_error", None, None)
        assert "429" in (refused.error or "") and gym.retries == retry.attempts - 1
        assert sampler.prompts == []  # no session, so the policy was never asked
        await gym.close(holder.session_id)
        played = await driver.run_episode(EpisodeSpec("counter", "counter-0001"))
    assert played.failure is None and played.stop_reason == "done"
    summary = summarize([refused, played])
    assert (summary["failures"], summary["scored"], summary["stop_reasons"]) == (
        1,
        1,
        {"done": 1, "gym_error": 1},
    )


@pytest.mark.slow
async def test_a_gym_restart_mid_episode_fails_it_and_the_client_carries_on(
    server_factory: Callable[..., ServerProcess], sqlite_url: str, renderer: ChatRenderer, scripted: Any
) -> None:
    server = server_factory(sqlite_url, GYM_LOG_LEVEL="warning")
    server.start()

    class RestartsTheGym(scripted):  # type: ignore[misc]
        async def sample(
            self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
        ) -> TokenSample:
            if len(self.prompts) == 1:  # while the model thinks about its second turn
                await asyncio.to_thread(server.stop)
                await asyncio.to_thread(server.start)
            answer: TokenSample = await super().sample(prompt_ids, params, stop_token_ids)
            return answer

    texts = [render_tool_call("read", {}), render_tool_call("read", {}), render_tool_call("submit", {})]
    async with GymClient(server.url) as gym:
        driver = RolloutDriver(gym, RestartsTheGym(renderer.tokenizer, texts), renderer, DriverConfig())
        lost = await driver.run_episode(EpisodeSpec("counter", "counter-0002"))
        assert (lost.failure, lost.stop_reason, lost.reward, lost.num_turns) == (
            "gym_error",
            "gym_error",
            None,
            2,
        )
        assert re.search(r"-> (404|410)", lost.error or ""), lost.error
        stored = await gym.wait_for_rollout(lost.session_id or "")
        assert stored["status"] == "lost" and stored["num_turns"] == 1
        # The pooled connections to the old process are gone; the next episode reconnects.
        after = await driver.run_episode(EpisodeSpec("counter", "counter-0003"))
    assert after.failure is None and after.stop_reason == "done"
    assert summarize([lost, after])["failures"] == 1


async def test_cancelled_episodes_close_their_sessions_before_the_caller_goes_on(
    gym_client: GymClient, renderer: ChatRenderer
) -> None:
    all_waiting = asyncio.Event()

    class Stuck:
        token_exact = True
        weight_version: str | None = None
        calls = 0

        def describe(self) -> dict[str, Any]:
            return {"model": "stuck"}

        async def aclose(self) -> None:
            return None

        async def sample(
            self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
        ) -> TokenSample:
            self.calls += 1
            if self.calls == 3:
                all_waiting.set()
            await asyncio.Event().wait()  # a policy that never answers
            raise AssertionError("unreachable")

    driver = RolloutDriver(gym_client, Stuck(), renderer, DriverConfig(run="cancelled"))
    manager = gym_client.app.state.manager  # type: ignore[attr-defined]
    specs = [EpisodeSpec("counter", f"counter-000{i}") for i in range(3)]
    playing = asyncio.create_task(driver.run_many(specs))
    await asyncio.wait_for(all_waiting.wait(), timeout=10)
    assert len(manager._live) == 3
    playing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await playing
    assert len(manager._live) == 0  # closed by the time run_many gave up, not left to the TTL reaper
    page = await apoll(
        lambda: gym_client.list_rollouts(run="cancelled"),
        lambda page: len(page["items"]) == 3 and all(item["status"] != "live" for item in page["items"]),
    )
    assert [item["status"] for item in page["items"]] == ["abandoned"] * 3
