"""The `inbox` verifier: the answer (an LLM judge's grade, or a normalized match) and the cited message ids.

The reward is a rubric (`verifiers.rubric`):

- gate `no_distractor`: the answer names none of the task's planted wrong values (the cancelled code,
  the proposed amount, the draft's sender...). A hedge ("X or maybe Y") scores 0 before anything else
  runs, judge included, so a judge cannot be talked into crediting one;
- score `answer` (weight 0.7): with a judge configured (`GYM_JUDGE__URL`), the judge's grade of the
  answer against the reference by `RUBRIC`; without one, 1.0 when the answer, normalized (case,
  punctuation, spacing), equals one of the accepted forms;
- score `citations` (weight 0.3): the F1 of the cited ids against the messages that state the answer
  (precision and recall are in `info`).

A judge that cannot decide makes the result `judge_failed` (reward 0, never trained on).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from gym_server.sdk.environment import VerifyResult
from gym_verifiers import judging
from gym_verifiers.result import VerifierResult
from gym_verifiers.rubric import Criterion, Rubric
from gym_verifiers.text import normalize_text, normalized_match

__all__ = ["RUBRIC", "InboxAnswer", "citation_scores", "names_distractor", "score_answer"]

RUBRIC = (
    "The response must state the single fact the task asks for, taken from the user's mailbox, and agree "
    "with the reference answer: same code, amount, room, count, person or date (any wording or date format "
    "is fine). Score the top of the scale only when it does, the bottom when it gives a different value, "
    "several candidate values, or no value. Extra explanation neither adds nor removes credit."
)
ANSWER_WEIGHT = 0.7
_NOT_WORD = re.compile(r"[^\w]+")
CITATION_WEIGHT = 0.3

Value = Annotated[str, Field(min_length=1, max_length=200)]


class InboxAnswer(BaseModel):
    """A task's hidden answer: accepted forms, planted wrong values, the ids that state the answer."""

    model_config = ConfigDict(extra="forbid")

    answers: list[Value] = Field(min_length=1, max_length=20)
    distractors: list[Value] = Field(default_factory=list, max_length=20)
    message_ids: list[Value] = Field(min_length=1, max_length=50)


def names_distractor(text: str, distractors: Sequence[str]) -> str | None:
    """The first planted wrong value the answer mentions (as whole words, normalized), if any."""
    said = f" {_words(text)} "
    for value in distractors:
        wrong = _words(value)
        if wrong and f" {wrong} " in said:
            return value
    return None


def _words(text: str) -> str:
    """Normalized text with symbols too ($, %, ...) turned into spaces: `$44,500` reads `44500`."""
    return " ".join(_NOT_WORD.sub(" ", normalize_text(text)).split())


def citation_scores(cited: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Precision, recall and F1 of the cited ids (duplicates count once) against the gold ids."""
    chosen, wanted = set(cited), set(gold)
    hits = len(chosen & wanted)
    precision = hits / len(chosen) if chosen else 0.0
    recall = hits / len(wanted) if wanted else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


async def score_answer(
    answer: InboxAnswer, *, question: str, text: str, cited: Sequence[str]
) -> VerifyResult:
    """Score one submitted answer and its citations (see the module docstring)."""
    citations = citation_scores(cited, answer.message_ids)
    scored_by: list[str] = []

    def gate(response: str) -> VerifierResult:
        wrong = names_distractor(response, answer.distractors)
        if wrong is None:
            return VerifierResult(1.0, {}, "names no planted wrong value")
        return VerifierResult.zero(f"the answer names the planted wrong value {wrong!r}")

    async def correct(response: str) -> VerifierResult:
        reference = answer.answers[0]
        judged = await judging.judge_response(
            RUBRIC, question=question, response=response, reference=reference
        )
        scored_by.append("rules" if judged is None else "judge")
        return judged if judged is not None else normalized_match(response, answer.answers)

    def cited_well(_response: str) -> VerifierResult:
        return VerifierResult(citations["f1"], {}, f"citation F1 {citations['f1']:.2f}")

    rubric = Rubric(
        [
            Criterion.gate("no_distractor", gate),
            Criterion("answer", correct, weight=ANSWER_WEIGHT),
            Criterion("citations", cited_well, weight=CITATION_WEIGHT),
        ]
    )
    result = await rubric.score(text)
    info: dict[str, Any] = {
        "answer": text[:200],
        "cited": list(cited)[:20],
        "citation_precision": citations["precision"],
        "citation_recall": citations["recall"],
        "scored_by": scored_by[0] if scored_by else "gate",
    }
    return result.to_verify_result(info=info)
