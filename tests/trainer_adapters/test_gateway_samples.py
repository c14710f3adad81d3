"""The splitting rule of gateway calls into training samples (gym_server.gateway.samples), on prompts
rendered by real chat templates with the tiny tokenizer: a ChatML template that keeps history makes one
sample of an episode; a Qwen3-style template that drops earlier reasoning starts a new sample where it
rewrote history. The masks cover exactly the model's tokens."""

from __future__ import annotations

from typing import Any

import pytest

from gym_server.gateway.samples import CallTokens, Sample, SampleTally, samples_report, split_samples

# Qwen3's rule, in a ChatML template: an assistant turn before the last user message loses its
# <think>...</think> reasoning; the turns of the current user query keep it.
QWEN3_STYLE = """
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor -%}
{%- for m in messages -%}
{%- set content = m.content -%}
{%- if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}
{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
{%- endif -%}
<|im_start|>{{ m.role }}
{{ content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""
KEEPS_HISTORY = QWEN3_STYLE.replace("and '</think>' in content", "and false")


class Agent:
    """Plays an episode's calls: each prompt rendered by `template`, each completion the tokens of a
    scripted reply and the end-of-turn token, with distinct logprobs."""

    def __init__(self, tokenizer: Any, template: str) -> None:
        self.tokenizer, self.template = tokenizer, template
        self.messages: list[dict[str, str]] = [{"role": "system", "content": "Count."}]
        self.calls: list[CallTokens] = []

    def render(self) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            self.messages, chat_template=self.template, tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def call(self, reply: str) -> None:
        prompt = self.render()
        completion = [*self.tokenizer.encode(reply, add_special_tokens=False), self.tokenizer.eos_token_id]
        logprobs = [-0.1 * (len(self.calls) + 1)] * len(completion)
        self.calls.append(CallTokens(len(self.calls), prompt, completion, logprobs))
        self.messages.append({"role": "assistant", "content": reply})

    def play(self) -> list[Sample]:
        self.messages.append({"role": "user", "content": "Bring the counter to 3."})
        self.call("<think>add 3</think>\nadd(3)")
        self.messages.append({"role": "tool", "content": "3"})
        self.call("<think>done</think>\nsubmit()")
        self.messages.append({"role": "tool", "content": "ok"})
        self.messages.append({"role": "user", "content": "Now to 5."})
        self.call("<think>add 2</think>\nadd(2)")
        return split_samples(self.calls)


def model_tokens(sample: Sample) -> list[int]:
    return [token for token, mask in zip(sample.completion_ids, sample.mask, strict=True) if mask]


def check_covers_exactly_the_model(sample: Sample, calls: list[CallTokens]) -> None:
    """Mask 1 on exactly the sampled tokens (with their logprobs), 0.0 logprob elsewhere, and the
    sequence is each call's prompt followed by its completion."""
    held = [calls[index] for index in sample.calls]
    assert len(sample.completion_ids) == len(sample.logprobs) == len(sample.mask)
    assert model_tokens(sample) == [t for call in held for t in call.completion_ids]
    assert [lp for lp, m in zip(sample.logprobs, sample.mask, strict=True) if m] == [
        lp for call in held for lp in call.logprobs
    ]
    assert all(lp == 0.0 for lp, m in zip(sample.logprobs, sample.mask, strict=True) if not m)
    sequence = sample.prompt_ids + sample.completion_ids
    for call in held:
        assert sequence[: len(call.prompt_ids)] == list(call.prompt_ids)
    last = held[-1]
    assert sequence[len(last.prompt_ids) :] == list(last.completion_ids)


@pytest.fixture
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    from gym_trainer.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


def test_a_template_that_keeps_history_makes_one_sample(tokenizer: Any) -> None:
    agent = Agent(tokenizer, KEEPS_HISTORY)
    [sample] = agent.play()
    assert sample.calls == [0, 1, 2] and sample.prompt_ids == list(agent.calls[0].prompt_ids)
    check_covers_exactly_the_model(sample, agent.calls)
    assert sample.mask.count(0) > 0  # the tool results and user turn in between


def test_dropped_reasoning_starts_a_new_sample_where_history_was_rewritten(tokenizer: Any) -> None:
    agent = Agent(tokenizer, QWEN3_STYLE)
    first, second = agent.play()
    # Within the first user query the reasoning stays, so the tool loop is one sample; the new query's
    # prompt holds the earlier turns without their <think>, which is not what the policy produced.
    assert (first.calls, second.calls) == ([0, 1], [2])
    assert second.prompt_ids == list(agent.calls[2].prompt_ids) and second.mask == [1] * len(second.mask)
    for sample in (first, second):
        check_covers_exactly_the_model(sample, agent.calls)


@pytest.mark.parametrize("template", [KEEPS_HISTORY, QWEN3_STYLE])
def test_the_tally_kept_call_by_call_agrees_with_the_report(tokenizer: Any, template: str) -> None:
    agent = Agent(tokenizer, template)
    agent.play()
    tally = SampleTally()
    for call in agent.calls:
        tally.add(call.prompt_ids, call.completion_ids)
    records = [
        {
            "call": c.index,
            "prompt_ids": c.prompt_ids,
            "completion_ids": c.completion_ids,
            "logprobs": c.logprobs,
        }
        for c in agent.calls
    ]
    report = samples_report(records)
    assert tally.summary() == {
        "token_exact": True,
        "num_samples": len(report.samples),
        "masked_share": report.masked_share,
        "num_calls": 3,
    }


def test_the_report_counts_masked_tokens_and_calls_without_token_ids() -> None:
    calls: list[dict[str, Any]] = [
        {"call": 0, "prompt_ids": [1, 2], "completion_ids": [3, 4], "logprobs": [-1.0, -2.0]},
        {"call": 1, "prompt_ids": [1, 2, 3, 4, 5, 6], "completion_ids": [7], "logprobs": [-3.0]},
        {"call": 2, "prompt_ids": [9], "completion_ids": [8], "logprobs": [-4.0]},
    ]
    report = samples_report(calls, reward=1.0)
    assert [s.calls for s in report.samples] == [[0, 1], [2]]
    assert report.samples[0].completion_ids == [3, 4, 5, 6, 7] and report.samples[0].mask == [1, 1, 0, 0, 1]
    assert report.samples[0].logprobs == [-1.0, -2.0, 0.0, 0.0, -3.0]
    assert report.masked_share == pytest.approx(2 / 6) and report.token_exact and report.num_calls == 3
    untokenized = samples_report([*calls, {"call": 3, "prompt_ids": None, "completion_ids": None}])
    assert untokenized.token_exact is False and untokenized.num_calls == 4 and len(untokenized.samples) == 2
    assert samples_report([]).masked_share == 0.0
