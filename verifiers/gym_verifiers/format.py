"""Where the answer sits in a completion, and whether the completion has the shape the task asked for.

Extraction is shared by the answer verifiers (`math`, `numeric`, `choice`): `final_answer()` takes the
last `\\boxed{}` (or `\\fbox{}`), else the last `<answer>...</answer>` block, else the last "the answer
is ..." / "Answer: ..." phrase. It also returns every *distinct* answer the completion committed to in
that form, so a verifier can refuse a completion that sprays several boxed answers hoping one is right.

The format checks are binary verifiers (score 1 only when every sub-check passes; each sub-check is a
component): `answer_tag_format` (exactly one non-empty answer block), `think_format` (a well-formed
`<think>...</think>` block followed by an answer), and `regex_match` (the response matches an author's
pattern). Every function here is pure and linear in the input; responses over `MAX_TEXT_CHARS` are
refused rather than scanned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gym_verifiers.result import Failure, VerifierResult

__all__ = [
    "MAX_CANDIDATES",
    "MAX_TEXT_CHARS",
    "FinalAnswer",
    "answer_tag_format",
    "extract_boxed",
    "extract_tagged",
    "final_answer",
    "regex_match",
    "strip_math_delimiters",
    "think_format",
]

MAX_TEXT_CHARS = 1_000_000  # about 250k tokens; the server's body limit is 2 MiB
MAX_CANDIDATES = 8  # more distinct answers than this is spraying: verifiers refuse without reading them

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)  # `\{` is a literal brace and `\\{` a line break then a group
_PHRASE = re.compile(
    r"(?:final\s+answer|the\s+answer)\s*(?:is|=|:)\s*:?\s*(?P<a>[^\n]{1,400})|^\W*answer\W*:\s*(?P<b>[^\n]{1,400})",
    re.IGNORECASE | re.MULTILINE,
)
_MATH_DELIMITERS = re.compile(r"\\[()\[\]]|(?<!\\)\$")  # `\$` is a dollar sign, not a delimiter
_TAG_NAME = re.compile(r"^[A-Za-z][\w-]{0,31}$")


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The answer a completion commits to.

    Attributes:
        text: the final answer (stripped), or None when the completion states none.
        source: where it was found: `boxed`, `tag` or `phrase`.
        candidates: every distinct answer stated in that same form, in order; more than one means hedging.
    """

    text: str | None
    source: Literal["boxed", "tag", "phrase"] | None
    candidates: tuple[str, ...] = ()


def extract_boxed(text: str) -> list[str]:
    """Contents of the top-level `\\boxed{...}` / `\\fbox{...}` groups in order; unclosed ones are skipped."""
    opens = [match.end() - 1 for match in _BOX_OPEN.finditer(text, 0, MAX_TEXT_CHARS)]
    if not opens:
        return []
    closing = _match_braces(text, opens[0])
    contents: list[str] = []
    covered = -1  # end of the last box taken: boxes nested inside it are part of its content
    for start in opens:
        end = closing.get(start)
        if end is None or start < covered:
            continue
        contents.append(text[start + 1 : end].strip())
        covered = end
    return contents


def extract_tagged(text: str, tag: str = "answer") -> list[str]:
    """Contents of every closed `<tag>...</tag>` block (case-insensitive), in order.

    One linear pass pairs each closing tag with the latest opening tag, so a response of a million
    unclosed `<answer>` tags costs no more than reading it once.
    """
    contents: list[str] = []
    start: int | None = None
    for match in re.finditer(rf"<(/?){re.escape(tag)}\s*>", text[:MAX_TEXT_CHARS], re.IGNORECASE):
        if not match.group(1):
            start = match.end()
        elif start is not None:
            contents.append(text[start : match.start()].strip())
            start = None
    return contents


def final_answer(text: str) -> FinalAnswer:
    """The completion's final answer: last boxed, else last answer tag, else last answer phrase."""
    boxed = [answer for answer in extract_boxed(text) if answer]
    if boxed:
        return FinalAnswer(boxed[-1], "boxed", _distinct(boxed))
    tagged = [answer for answer in extract_tagged(text) if answer]
    if tagged:
        return FinalAnswer(tagged[-1], "tag", _distinct(tagged))
    phrases = [match.group("a") or match.group("b") for match in _PHRASE.finditer(text, 0, MAX_TEXT_CHARS)]
    if phrases:
        answer = _clean_phrase(phrases[-1])
        if answer:
            return FinalAnswer(answer, "phrase", (answer,))
    return FinalAnswer(None, None)


def answer_tag_format(response: str, tag: str = "answer") -> VerifierResult:
    """1.0 when the response holds exactly one closed, non-empty `<tag>...</tag>` block."""
    if not _TAG_NAME.match(tag):
        return VerifierResult.zero(f"tag name {tag!r} is not a valid tag", failure=Failure.INVALID_REFERENCE)
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(f"response longer than {MAX_TEXT_CHARS} characters")
    blocks = extract_tagged(response, tag)
    opened = len(re.findall(rf"<{re.escape(tag)}\s*>", response, re.IGNORECASE))
    components = {"present": float(bool(blocks)), "single": float(len(blocks) == 1 == opened)}
    components["non_empty"] = float(bool(blocks) and all(blocks))
    if not blocks:
        return VerifierResult.zero(f"no closed <{tag}>...</{tag}> block", components)
    if len(blocks) != 1 or opened != 1:
        return VerifierResult.zero(
            f"{max(opened, len(blocks))} <{tag}> blocks; exactly one is allowed", components
        )
    return VerifierResult.binary(
        bool(blocks[0]), f"one <{tag}> block" + ("" if blocks[0] else ", but empty"), components
    )


def think_format(
    response: str, *, opened_in_prompt: bool = False, require_answer_tag: bool = False
) -> VerifierResult:
    """1.0 for a well-formed reasoning block: `<think>` first, one `</think>`, then a non-empty answer.

    Args:
        response: the assistant's text.
        opened_in_prompt: the chat template already emitted `<think>`, so the response must not repeat it.
        require_answer_tag: the text after `</think>` must also contain exactly one `<answer>` block.
    """
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(f"response longer than {MAX_TEXT_CHARS} characters")
    opens = [m.start() for m in re.finditer(r"<think\s*>", response, re.IGNORECASE)]
    closes = [m.end() for m in re.finditer(r"</think\s*>", response, re.IGNORECASE)]
    # With the tag in the prompt the response must not open another; otherwise it opens exactly one, first.
    open_ok = not opens if opened_in_prompt else len(opens) == 1 and not response[: opens[0]].strip()
    close_ok = len(closes) == 1 and (not opens or closes[0] > opens[0])
    after = response[closes[-1] :] if closes else ""
    components = {
        "think_open": float(open_ok),
        "think_close": float(close_ok),
        "answer_after": float(bool(after.strip())),
    }
    if require_answer_tag:
        components["answer_tag"] = answer_tag_format(after).score
    problems = [name for name, value in components.items() if value < 1.0]
    if problems:
        return VerifierResult.zero(
            "malformed reasoning block: " + ", ".join(problems) + " failed", components
        )
    return VerifierResult.binary(True, "well-formed <think> block followed by an answer", components)


def regex_match(
    response: str, pattern: str, *, full: bool = True, ignore_case: bool = False
) -> VerifierResult:
    """1.0 when the stripped response matches `pattern` (whole string when `full`, else anywhere).

    The pattern is the task author's and trusted; the response is capped at `MAX_TEXT_CHARS`, but a
    pattern prone to catastrophic backtracking is still the author's responsibility.
    """
    try:
        compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        return VerifierResult.zero(f"invalid pattern: {exc}", failure=Failure.INVALID_REFERENCE)
    if len(response) > MAX_TEXT_CHARS:
        return VerifierResult.zero(f"response longer than {MAX_TEXT_CHARS} characters")
    text = response.strip()
    matched = compiled.fullmatch(text) if full else compiled.search(text)
    how = "matches" if matched else "does not match"
    return VerifierResult.binary(
        matched is not None, f"response {how} /{pattern[:80]}/", {"match": float(bool(matched))}
    )


def _match_braces(text: str, start: int) -> dict[int, int]:
    """Map each `{` at or after `start` to its closing `}` in one pass; unclosed braces are absent."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE.finditer(text, start, MAX_TEXT_CHARS):
        token = match.group()
        if token == "{":
            stack.append(match.start())
        elif token == "}" and stack:
            closing[stack.pop()] = match.start()
    return closing


def _distinct(answers: list[str]) -> tuple[str, ...]:
    """Answers that differ beyond whitespace, first occurrence kept, in order."""
    seen: dict[str, str] = {}
    for answer in answers:
        seen.setdefault("".join(answer.split()), answer)
    return tuple(seen.values())


def strip_math_delimiters(text: str) -> str:
    """Remove inline-math delimiters (`$`, `\\(`, `\\)`, `\\[`, `\\]`) but keep escaped dollars (`\\$5`)."""
    return _MATH_DELIMITERS.sub("", text).strip()


def _clean_phrase(phrase: str) -> str:
    """Trim a phrase answer to its math: no math delimiters, markdown bold, or closing full stop."""
    return strip_math_delimiters(phrase.replace("**", "")).rstrip(".").strip()
