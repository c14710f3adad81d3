"""The `inbox` environment (ART·E-style): answer a question from a mailbox of thousands of messages.

Each task names a mailbox seed, a question family and a size; `setup()` rebuilds that mailbox
(`questions.build_episode`, a pure function, so nothing but the seed is stored) and the model digs
through it with `search_inbox` and `read_email`, then calls `answer(text, message_ids)` with the fact
and the ids of the messages that state it. The episode's own seed does not change the mailbox: the
gold message ids are part of the task. Scoring is in `scoring.py`: an LLM judge grades the answer when
the operator configured one (`GYM_JUDGE__URL`), a normalized match otherwise; citations add their F1.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gym_env_inbox import mailbox as mailbox_module
from gym_env_inbox import questions as questions_module
from gym_env_inbox import scoring as scoring_module
from gym_env_inbox.mailbox import YEAR, Email
from gym_env_inbox.questions import FAMILIES, build_episode
from gym_env_inbox.scoring import RUBRIC, InboxAnswer, score_answer
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["InboxEnv", "MailboxSpec"]

Text = Annotated[str, Field(max_length=200)]
Keywords = Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=10)]
Cited = Annotated[list[Annotated[str, Field(max_length=40)]], Field(max_length=20)]
MAX_RESULTS = 10

SYSTEM_PROMPT = (
    "You answer the user's question from their email, which you can only reach through the tools. "
    "search_inbox finds messages that contain every keyword (and match the optional sender, recipient and "
    "date filters), newest first; read_email shows one message in full. Mail can be corrected or "
    "superseded by later messages: check before you answer. When you know the answer, call answer() once "
    "with the value alone (for example `QX7R2P`, `$12,500`, `Maple`, `3`, `Ava Rossi` or `2024-05-14`) "
    "and the ids of the messages that state it. The episode ends there."
)


class MailboxSpec(BaseModel):
    """`metadata` of a task: which mailbox to build and which question family plants the answer."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(ge=0, lt=2**63)
    family: str
    size: int = Field(2000, ge=10, le=5000)

    @field_validator("family")
    @classmethod
    def _known_family(cls, family: str) -> str:
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        return family


class InboxEnv(Environment):
    """Search a generated mailbox, read messages, answer with the fact and the ids that state it."""

    name = "inbox"
    description = "Answer a question from a generated mailbox of ~2,000 messages; cite the message ids."
    multi_turn = True
    max_turns = 12
    system_prompt = SYSTEM_PROMPT
    judge_rubric: ClassVar[str | None] = RUBRIC
    reward_type = "0..1: the answer 0.7 (normalized match, or the rubric judge) + citation F1 0.3"
    verifier_version = content_hash(
        [
            Path(__file__),
            Path(mailbox_module.__file__),
            Path(questions_module.__file__),
            Path(scoring_module.__file__),
        ]
    )
    # a mailbox of ~2,000 messages: rebuilding it from task and seed beats deep-copying it
    fork_mode = ForkMode.REPLAY

    @classmethod
    def check_task(cls, task: Task) -> None:
        """The answer is an `InboxAnswer`; `metadata.mailbox` a `MailboxSpec`."""
        check_task_field(InboxAnswer, task.answer, "answer")
        check_task_field(MailboxSpec, task.metadata.get("mailbox"), "metadata.mailbox")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.emails: dict[str, Email] = {}
        self.ordered: list[Email] = []
        self.owner = ""
        self.submitted: str | None = None
        self.cited: list[str] = []

    async def setup(self) -> None:
        spec = MailboxSpec.model_validate(self.task.metadata.get("mailbox"))
        mailbox, _ = build_episode(spec.seed, spec.family, spec.size)
        self.ordered = mailbox.emails
        self.emails = mailbox.by_id()
        self.owner = f"{mailbox.owner.name} <{mailbox.owner.address}>"

    def opening_messages(self) -> list[dict[str, Any]]:
        size = len(self.emails)
        context = f"The mailbox belongs to {self.owner}. Today is {YEAR}-12-31; it holds {size} messages."
        opening: list[dict[str, Any]] = [{"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{context}"}]
        prompt = self.task.prompt
        opening.append({"role": "user", "content": prompt if isinstance(prompt, str) else str(prompt)})
        return opening

    @tool
    async def search_inbox(
        self,
        keywords: Keywords,
        from_addr: Text = "",
        to_addr: Text = "",
        after: Text = "",
        before: Text = "",
    ) -> dict[str, Any]:
        """Find messages containing every keyword (sender, subject or body), newest first, at most 10.

        Args:
            keywords: words that must all appear, case-insensitive, e.g. ["Lisbon", "booking"]
            from_addr: only messages whose sender's name or address contains this
            to_addr: only messages sent to an address containing this
            after: only messages on or after this day, YYYY-MM-DD
            before: only messages before this day, YYYY-MM-DD
        """
        words = [word.casefold().strip() for word in keywords if word.strip()]
        start, end = _day(after, "after"), _day(before, "before")
        if not (words or from_addr.strip() or to_addr.strip() or start or end):
            raise ToolError("give at least one keyword or filter; the mailbox is too large to list.")
        sender, recipient = from_addr.casefold().strip(), to_addr.casefold().strip()
        found = [
            email
            for email in self.ordered
            if all(word in email.haystack() for word in words)
            and (not sender or sender in f"{email.sender.name} {email.sender.address}".casefold())
            and (not recipient or any(recipient in address for address in email.to))
            and (not start or email.date[:10] >= start)
            and (not end or email.date[:10] < end)
        ]
        return {"results": [email.summary() for email in found[:MAX_RESULTS]], "total": len(found)}

    @tool
    async def read_email(self, message_id: Text) -> dict[str, Any]:
        """Read one message in full.

        Args:
            message_id: the message's id, as search_inbox shows it (e.g. m3f9a2c41)
        """
        email = self.emails.get(message_id.strip())
        if email is None:
            raise ToolError(f"no message with id {message_id[:40]!r}; search_inbox lists message ids.")
        return email.full()

    @tool
    async def answer(self, text: Annotated[str, Field(max_length=500)], message_ids: Cited) -> str:
        """Give the final answer and the ids of the messages that state it. The episode ends.

        Args:
            text: the answer alone, e.g. QX7R2P, $12,500, Maple, 3, Ava Rossi or 2024-05-14
            message_ids: ids of the messages the answer comes from (at most 20)
        """
        self.submitted = text
        self.cited = [identifier.strip() for identifier in message_ids]
        self.finish("answered")
        return "Answer recorded."

    def reference_solution(self) -> list[dict[str, Any]]:
        """Answer with the gold value, citing the messages that state it."""
        gold = InboxAnswer.model_validate(self.task.answer)
        return [
            tool_call_message("answer", {"text": gold.answers[0], "message_ids": gold.message_ids}, "ref_1")
        ]

    def hack_probes(self) -> list[HackProbe]:
        """The planted wrong values: a superseded or decoy value with the right citations, and a hedge
        of the gold value with one, must both score 0."""
        gold = InboxAnswer.model_validate(self.task.answer)
        if not gold.distractors:
            return []
        decoy, cited = gold.distractors[0], gold.message_ids

        def answering(text: str) -> list[dict[str, Any]]:
            return [tool_call_message("answer", {"text": text, "message_ids": cited}, "probe_1")]

        return [
            HackProbe(
                name="distractor",
                messages=answering(decoy),
                why="a planted wrong value (superseded or decoy), cited with the gold messages",
            ),
            HackProbe(
                name="hedge-with-distractor",
                messages=answering(f"{gold.answers[0]} or {decoy}"),
                why="the gold value and a planted wrong one in one answer",
            ),
        ]

    async def verify(self) -> VerifyResult:
        answer = InboxAnswer.model_validate(self.task.answer)
        prompt = self.task.prompt if isinstance(self.task.prompt, str) else str(self.task.prompt)
        text = self.submitted if self.submitted is not None else self.final_answer()
        result = await score_answer(answer, question=prompt, text=text, cited=self.cited)
        result.info["through_tool"] = self.submitted is not None
        return result


def _day(text: str, label: str) -> str:
    value = text.strip()
    if not value:
        return ""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ToolError(f"{label} must be a day written YYYY-MM-DD, got {value[:40]!r}.") from None
