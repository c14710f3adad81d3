"""Chat rendering for token-exact rollouts: the prompt once, then only deltas.

A multi-turn episode's tokens must be exactly the tokens the policy saw and produced. Re-rendering the
whole conversation from text after every turn breaks that (a model's `{"amount":3}` re-rendered as
`{"amount": 3}` is a different token sequence, and the trainer would score tokens nobody sampled). So
`ChatRenderer` renders the opening messages once, keeps the sampled tokens verbatim, and turns each
batch of environment replies into a *delta*: the text the chat template puts between the end of an
assistant turn (its end-of-turn token) and the start of the next assistant turn, computed by rendering
a throwaway conversation with and without the replies. No earlier turn is ever rendered again.

`HERMES_TEMPLATE` is a ChatML template with Hermes/Qwen2.5-style tools (schemas in the system turn,
`<tool_call>` blocks in assistant turns, `<tool_response>` blocks in a user turn). The tiny test model
and SmolLM2 (whose own template has no tools) use it; a model with its own tool-aware template keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "HERMES_TEMPLATE",
    "TOOLS_INTRO",
    "TOOLS_OUTRO",
    "ChatRenderer",
    "Rendered",
    "Renderer",
    "TokenizerLike",
]

# The template's fixed texts around the tool schemas (after the system prompt, before `<|im_end|>`).
TOOLS_INTRO = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)
HERMES_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '" + TOOLS_INTRO.replace("\n", "\\n") + "' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '" + TOOLS_OUTRO.replace("\n", "\\n") + "<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}"
    "{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + (message['content'] or '') + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class TokenizerLike(Protocol):
    """What the renderer needs of a Hugging Face tokenizer (kept structural: no transformers import)."""

    eos_token_id: Any
    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...

    def decode(self, token_ids: Any, **kwargs: Any) -> str: ...

    def convert_tokens_to_ids(self, tokens: Any) -> Any: ...

    def __len__(self) -> int: ...


class Renderer(Protocol):
    """What the rollout driver needs to keep an episode's tokens exact. Async so that a renderer may
    live in another process (`RemoteRenderer` asks the policy server's `/tokenize`)."""

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    async def prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]: ...

    async def delta_ids(self, replies: Sequence[dict[str, Any]]) -> list[int]: ...

    async def text(self, ids: Sequence[int]) -> str:
        """Exact text of ids, special tokens included."""
        ...

    async def turn_text(self, ids: Sequence[int]) -> str:
        """A sampled turn's text for tool-call parsing, without its end-of-turn token."""
        ...


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    ids: list[int]


_PROBE = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": "probe"}]


def _content_text(message: dict[str, Any]) -> dict[str, Any]:
    """Flatten OpenAI content parts to text, and stringify non-string tool results."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    elif content is not None and not isinstance(content, str):
        content = str(content)
    return {**message, "content": content}


class ChatRenderer:
    """Renders prompts and environment deltas with one tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer (fast or slow).
        chat_template: overrides the tokenizer's own template (e.g. `HERMES_TEMPLATE`).
    """

    def __init__(self, tokenizer: TokenizerLike, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template or tokenizer.chat_template or HERMES_TEMPLATE
        self._eos_ids = self._end_of_turn_ids()
        self._eos_text = tokenizer.decode([self.primary_eos_id], skip_special_tokens=False)

    def __repr__(self) -> str:
        return f"ChatRenderer(eos={sorted(self.eos_token_ids)})"

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos_ids

    def _end_of_turn_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        eos = self.tokenizer.eos_token_id
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(i) for i in eos)
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end >= 0 and "<|im_end|>" in self.chat_template:
            ids.add(im_end)
        if not ids:
            raise ValueError("the tokenizer has no end-of-turn token (eos_token_id)")
        return frozenset(ids)

    @property
    def primary_eos_id(self) -> int:
        """The token that ends an assistant turn in this template (`<|im_end|>` for ChatML)."""
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end in self.eos_token_ids:
            return im_end
        return min(self.eos_token_ids)

    def _render(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, generation: bool
    ) -> str:
        text = self.tokenizer.apply_chat_template(
            [_content_text(m) for m in messages],
            tools=list(tools) if tools else None,
            chat_template=self.chat_template,
            add_generation_prompt=generation,
            tokenize=False,
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Exact text of token ids, special tokens included (the invariant tests compare with this)."""
        return self.tokenizer.decode(self._known(ids), skip_special_tokens=False)

    def _known(self, ids: Sequence[int]) -> list[int]:
        """The ids, if all are in the vocabulary: tokenizers decode unknown ids to nothing, silently,
        and a trainer would then index past its embedding table."""
        size = len(self.tokenizer)
        unknown = [i for i in ids if not 0 <= i < size]
        if unknown:
            raise ValueError(f"token ids outside the vocabulary of {size}: {unknown[:5]}")
        return list(ids)

    def render_prompt(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Rendered:
        """The opening messages with the tools and the generation prompt, rendered once per episode."""
        text = self._render(messages, tools, generation=True)
        return Rendered(text, self.encode(text))

    def render_delta(self, replies: Sequence[dict[str, Any]]) -> Rendered:
        """The tokens that follow an assistant turn's end-of-turn token: the replies, then the next
        assistant header. Rendered against a throwaway conversation, so no real turn is re-rendered.

        Raises:
            ValueError: the template renders earlier turns differently once replies follow them, so
                no delta exists (such a template cannot be used token-exactly).
        """
        before = self._render(_PROBE, None, generation=False)
        after = self._render([*_PROBE, *replies], None, generation=True)
        cut = before.rfind(self._eos_text)
        if cut < 0:
            raise ValueError("the chat template does not end assistant turns with the end-of-turn token")
        cut += len(self._eos_text)
        if after[:cut] != before[:cut]:
            raise ValueError("the chat template re-renders earlier turns when replies follow")
        text = after[cut:]
        return Rendered(text, self.encode(text))

    def completion_text(self, ids: Sequence[int]) -> str:
        """The text of a sampled turn for parsing: without its end-of-turn token or other specials."""
        body = self._known(ids)
        while body and body[-1] in self.eos_token_ids:
            body.pop()
        return self.tokenizer.decode(body, skip_special_tokens=True)

    # -- the async `Renderer` interface the driver uses ---------------------------------------------

    async def prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]:
        return self.render_prompt(messages, tools).ids

    async def delta_ids(self, replies: Sequence[dict[str, Any]]) -> list[int]:
        return self.render_delta(replies).ids

    async def text(self, ids: Sequence[int]) -> str:
        return self.decode(ids)

    async def turn_text(self, ids: Sequence[int]) -> str:
        return self.completion_text(ids)

    def render_messages(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, generation: bool
    ) -> str:
        """A conversation's text, with or without the generation prompt (for `/tokenize`)."""
        return self._render(messages, tools, generation)
