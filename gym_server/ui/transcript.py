"""A stored transcript as the trajectory page shows it: text with highlighted code, tool calls, folds.

Highlighting happens here, server-side with Pygments, so the page needs no highlighting script and a
transcript renders the same in the browser, in a test and in a saved page. Everything a model or a tool
wrote is escaped before it reaches the page (Pygments escapes what it highlights; `escape` the rest).

Pygments costs 5 to 16 µs a character and a transcript may hold 8 MiB, so highlighting is capped
(`HighlightBudget`): a block over `HIGHLIGHT_BLOCK_CHARS`, or past the page's `HIGHLIGHT_PAGE_CHARS`, is
shown as plain escaped text, and the page says how many were. The page is rendered in a worker thread
(gym_server/ui/routes.py): the caps bound how long that thread holds the GIL in all.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import JsonLexer, PythonLexer, TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = [
    "FOLD_CHARS",
    "FOLD_LINES",
    "HIGHLIGHT_BLOCK_CHARS",
    "HIGHLIGHT_PAGE_CHARS",
    "HighlightBudget",
    "RenderedMessage",
    "ScoreChange",
    "TurnTokens",
    "highlight_css",
    "render_messages",
    "score_changes",
    "turn_tokens",
]

# Outputs longer than this are folded (a <details> the reader opens), so a 1 MiB stdout never buries a
# transcript.
FOLD_LINES = 25
FOLD_CHARS = 3_000

# The most characters one code block, and one page in all, get highlighted (about 0.1-0.3 s and 0.5-1.6 s of
# CPU): beyond them code is shown plain. Escaping and folding cost little at any size.
HIGHLIGHT_BLOCK_CHARS = 20_000
HIGHLIGHT_PAGE_CHARS = 100_000

_FENCE = re.compile(r"```([\w+-]*)\n(.*?)```", re.DOTALL)
_CODE_KEYS = ("code", "program", "source", "script", "solution", "completion")
_FORMATTER = HtmlFormatter(cssclass="hl")


@functools.cache
def highlight_css() -> str:
    """The stylesheet of the highlighted blocks (Pygments' default style, scoped to `.hl`)."""
    return str(_FORMATTER.get_style_defs(".hl"))


def _lexer(language: str) -> Lexer:
    try:
        return get_lexer_by_name(language or "python")
    except ClassNotFound:
        return TextLexer()


class HighlightBudget:
    """What one page may still highlight; `plain` counts the blocks shown unhighlighted instead."""

    def __init__(
        self, page_chars: int = HIGHLIGHT_PAGE_CHARS, block_chars: int = HIGHLIGHT_BLOCK_CHARS
    ) -> None:
        self.left = page_chars
        self.block_chars = block_chars
        self.plain = 0

    def __repr__(self) -> str:
        return f"HighlightBudget(left={self.left}, block_chars={self.block_chars}, plain={self.plain})"

    def highlight(self, code: str, lexer: Lexer) -> Markup:
        """The code highlighted, or escaped in a plain block when over a cap."""
        if len(code) > self.block_chars or len(code) > self.left:
            self.plain += 1
            return Markup('<div class="hl plain"><pre>{}</pre></div>').format(code)
        self.left -= len(code)
        return Markup(pygments_highlight(code, lexer, _FORMATTER))


def render_text(text: str, budget: HighlightBudget | None = None) -> Markup:
    """Plain text escaped, fenced code blocks highlighted by their language (Python when unnamed)."""
    budget = budget or HighlightBudget()
    parts: list[Markup] = []
    position = 0
    for fence in _FENCE.finditer(text):
        parts.append(Markup('<div class="text">{}</div>').format(text[position : fence.start()]))
        parts.append(budget.highlight(fence.group(2), _lexer(fence.group(1))))
        position = fence.end()
    parts.append(Markup('<div class="text">{}</div>').format(text[position:]))
    return Markup("").join(part for part in parts if part != Markup('<div class="text"></div>'))


def _content_text(content: Any) -> str:
    """A message's content as text: a string as is, OpenAI content parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text", "") if isinstance(part, dict) else str(part) for part in content]
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, indent=2)


@dataclass(slots=True)
class RenderedCall:
    """One tool call: its id, the tool's name, its arguments highlighted (code arguments on their own)."""

    id: str
    name: str
    arguments: Markup
    code: list[tuple[str, Markup]] = field(default_factory=list)


@dataclass(slots=True)
class RenderedMessage:
    """A message of the transcript ready for the template."""

    index: int
    role: str
    body: Markup
    chars: int
    lines: int
    folded: bool
    tool_call_id: str | None = None
    name: str | None = None
    calls: list[RenderedCall] = field(default_factory=list)


def _render_call(call: dict[str, Any], position: int, budget: HighlightBudget) -> RenderedCall:
    function = call.get("function") or {}
    raw = function.get("arguments", "")
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    code: list[tuple[str, Markup]] = []
    try:
        parsed = json.loads(text) if text else {}
    except json.JSONDecodeError:
        # The model wrote arguments that are not JSON: show them as it wrote them.
        return RenderedCall(
            str(call.get("id", position)), str(function.get("name", "?")), budget.highlight(text, TextLexer())
        )
    if isinstance(parsed, dict):
        for key, value in parsed.items():
            if isinstance(value, str) and ("\n" in value or key in _CODE_KEYS):
                code.append((key, budget.highlight(value, PythonLexer())))
    pretty = json.dumps(parsed, ensure_ascii=False, indent=2)
    return RenderedCall(
        str(call.get("id", position)),
        str(function.get("name", "?")),
        budget.highlight(pretty, JsonLexer()),
        code,
    )


def render_messages(
    messages: list[dict[str, Any]], budget: HighlightBudget | None = None
) -> list[RenderedMessage]:
    """Every message of a transcript, tool results folded when long, highlighting within `budget`."""
    budget = budget or HighlightBudget()
    rendered = []
    for index, message in enumerate(messages):
        text = _content_text(message.get("content"))
        lines = text.count("\n") + 1 if text else 0
        role = str(message.get("role", "?"))
        calls = [
            _render_call(call, position, budget)
            for position, call in enumerate(message.get("tool_calls") or [])
        ]
        rendered.append(
            RenderedMessage(
                index=index,
                role=role,
                body=render_text(text, budget),
                chars=len(text),
                lines=lines,
                folded=lines > FOLD_LINES or len(text) > FOLD_CHARS,
                tool_call_id=message.get("tool_call_id"),
                name=message.get("name"),
                calls=calls,
            )
        )
    return rendered


@dataclass(frozen=True, slots=True)
class TurnTokens:
    """Token counts of one policy turn, from the driver's per-turn data."""

    turn: int
    prompt: int
    env: int
    completion: int
    finish_reason: str | None


def turn_tokens(turns: list[dict[str, Any]]) -> list[TurnTokens]:
    """Per-turn token counts where the driver stored token ids (an empty list otherwise)."""
    counts = []
    for position, turn in enumerate(turns):
        if not isinstance(turn, dict):
            continue
        counts.append(
            TurnTokens(
                turn=int(turn.get("turn", position)),
                prompt=len(turn.get("prompt_ids") or []),
                env=len(turn.get("env_ids") or []),
                completion=len(turn.get("completion_ids") or []),
                finish_reason=turn.get("finish_reason"),
            )
        )
    return counts


@dataclass(frozen=True, slots=True)
class ComponentChange:
    name: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before


@dataclass(frozen=True, slots=True)
class ScoreChange:
    """One re-score against the score it replaced: reward, verifier version and each component."""

    when: str
    previous_reward: float | None
    reward: float | None
    previous_verifier_version: str | None
    verifier_version: str | None
    failure: str | None
    components: list[ComponentChange]

    @property
    def delta(self) -> float | None:
        if self.previous_reward is None or self.reward is None:
            return None
        return self.reward - self.previous_reward


def score_changes(rescores: list[Any]) -> list[ScoreChange]:
    """Each re-score (oldest first) with the diff to the score before it.

    A re-score row keeps the reward it replaced but not that score's components; the components before a
    re-score are the previous re-score's, and unknown (None) before the first.
    """
    changes = []
    before: dict[str, float] = {}
    for rescore in rescores:
        after: dict[str, float] = rescore.components
        names = sorted(set(before) | set(after))
        changes.append(
            ScoreChange(
                when=rescore.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                previous_reward=rescore.previous_reward,
                reward=rescore.reward,
                previous_verifier_version=rescore.previous_verifier_version,
                verifier_version=rescore.verifier_version,
                failure=rescore.failure,
                components=[ComponentChange(name, before.get(name), after.get(name)) for name in names],
            )
        )
        before = after
    return changes
