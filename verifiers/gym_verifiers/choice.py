"""Multiple-choice answers: find the one letter a response commits to, refusing any that name several.

Where the letter is looked for, in order:

1. an explicit answer: the last `\\boxed{}`, else the last `<answer>` block, else the last "the answer
   is ..." / "Answer: ..." phrase (`format.final_answer`). Its first standalone capital (`B`, `(B)`,
   `B.`, `**B**`, `B) Paris`) is the choice; a lone lowercase letter (`answer: b`) counts too.
2. otherwise the last non-empty line, only when it *is* a choice: `B`, `(B)`, `[B]`, `B.`, or a letter
   with closing punctuation before the option's text (`B. Paris`, `(B) Paris`). Free prose ("A cat
   sat") never yields a letter.

Anti-hedging: letters joined by `or`, `and`, `,`, `/` or `&` (`A or B`, `(A), (C)`), or several boxed or
tagged answers with different letters, score 0 with the reason, even when one of them is right. A
letter outside the allowed set (`E` in a four-option question) is no answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gym_verifiers.format import MAX_CANDIDATES, MAX_TEXT_CHARS, final_answer
from gym_verifiers.result import Failure, VerifierResult

__all__ = ["Choice", "choice_match", "extract_choice"]

_LEADING = re.compile(r"^[\s(\[*]*([A-Z])(?![\w'])")
_BARE = re.compile(r"^[\s(\[*]*([A-Za-z])[\s)\].:*]*$")
_LINE_CHOICE = re.compile(r"^[\s(\[*]*([A-Z])(?:[\s)\].:*]*$|\s*[)\].:]\s*\**\s*\S)")
_JOINED = re.compile(
    r"(?<![A-Za-z])([A-Z])\W{0,3}(?:,|/|&|\bor\b|\band\b)\W{0,3}\(?([A-Z])(?![a-z])", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Choice:
    """What a response chose: a letter, or None with the reason (no letter, several letters)."""

    letter: str | None
    reason: str
    hedged: bool = False


def extract_choice(response: str, letters: str = "ABCD") -> Choice:
    """The single letter among `letters` that `response` commits to."""
    allowed = letters.upper()
    answer = final_answer(response)
    if len(answer.candidates) > MAX_CANDIDATES:
        return Choice(None, f"hedged: {len(answer.candidates)} different answers", True)
    if answer.text is not None:
        found = [_letter_of(candidate, allowed) for candidate in answer.candidates]
        hedged = [choice for choice in found if choice.hedged]
        if hedged:
            return hedged[0]
        chosen = sorted({choice.letter for choice in found if choice.letter})
        if len(chosen) > 1:
            return Choice(
                None, f"hedged: {len(found)} answers name different letters ({', '.join(chosen)})", True
            )
        return found[-1]
    lines = [line for line in response.splitlines() if line.strip()]
    if not lines:
        return Choice(None, "empty response")
    last = lines[-1].strip()
    hedge = _hedge(last, allowed)
    if hedge:
        return hedge
    bare = _BARE.match(last) or _LINE_CHOICE.match(last)
    if bare and bare.group(1).upper() in allowed:
        return Choice(bare.group(1).upper(), f"the last line chooses {bare.group(1).upper()}")
    return Choice(None, f"no choice among {allowed} found; state it as 'Answer: X'")


def choice_match(response: str, reference: str, *, letters: str = "ABCD") -> VerifierResult:
    """1.0 when the response chooses exactly the reference letter."""
    expected = reference.strip().strip("()").upper()
    if len(expected) != 1 or expected not in letters.upper():
        return VerifierResult.zero(
            f"reference {reference!r} is not one of {letters.upper()}", failure=Failure.INVALID_REFERENCE
        )
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(
            f"response longer than {MAX_TEXT_CHARS} characters", {"extracted": 0.0, "correct": 0.0}
        )
    choice = extract_choice(response, letters)
    if choice.letter is None:
        return VerifierResult.zero(
            choice.reason, {"extracted": 0.0, "correct": 0.0, "hedged": float(choice.hedged)}
        )
    hit = choice.letter == expected
    verdict = "is" if hit else "is not"
    return VerifierResult.binary(
        hit,
        f"chose {choice.letter}, which {verdict} the reference {expected}",
        {"extracted": 1.0, "correct": float(hit)},
    )


def _letter_of(candidate: str, allowed: str) -> Choice:
    """The letter an explicit answer names: a lone letter (any case) or a leading capital."""
    hedge = _hedge(candidate, allowed)
    if hedge:
        return hedge
    match = _BARE.match(candidate) or _LEADING.match(candidate)
    if match and match.group(1).upper() in allowed:
        return Choice(match.group(1).upper(), f"the answer names {match.group(1).upper()}")
    return Choice(None, f"the answer {candidate[:40]!r} names none of {allowed}")


def _hedge(text: str, allowed: str) -> Choice | None:
    """A refusal when `text` joins two different allowed letters with a connective."""
    for match in _JOINED.finditer(text[:2000]):
        first, second = match.group(1).upper(), match.group(2).upper()
        if first != second and first in allowed and second in allowed:
            return Choice(None, f"hedged: {match.group().strip()!r} names several letters", True)
    return None
