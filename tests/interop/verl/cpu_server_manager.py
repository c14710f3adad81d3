"""A CPU stand-in for verl's server manager: the one part of verl's rollout that needs a GPU.

verl's `LLMServerClient.generate(request_id, prompt_ids=..., sampling_params=...)` sends token ids to
vLLM or SGLang servers (GPU only) and returns a `TokenOutput`. This class has the same call and returns
verl's real `TokenOutput`, computed by a real transformers model on the CPU: each token is drawn from
softmax(logits / temperature) (greedy at temperature 0), its logprob is the log-softmax at that
temperature, and it stops at `stop_token_ids` or `max_tokens`.

`script`, when set, is the policy's text for each turn, chosen from the conversation so far (a tiny
random model never writes a tool call): the scripted tokens are then forced, but every logprob is still
the model's own for the token it returns, so the logprob checks hold either way.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

Script = Callable[[str], str]


class CpuServerManager:
    def __init__(self, model: Any, tokenizer: Any, script: Script | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        ids, logprobs = await asyncio.to_thread(self._generate, request_id, prompt_ids, dict(sampling_params))
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "token_ids": ids})
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")

    def _generate(
        self, request_id: str, prompt_ids: list[int], params: dict[str, Any]
    ) -> tuple[list[int], list[float]]:
        temperature = float(params.get("temperature", 1.0))
        stops = set(params.get("stop_token_ids") or [])
        forced: list[int] | None = None
        if self.script is not None:
            text = self.script(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
            forced = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        generator = torch.Generator().manual_seed(zlib.crc32(f"{request_id}:{len(prompt_ids)}".encode()))
        sequence, out, logprobs = list(prompt_ids), [], []
        with torch.no_grad():
            for step in range(int(params["max_tokens"])):
                logits = self.model(torch.tensor([sequence])).logits[0, -1].float()
                scaled = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
                if forced is not None:
                    token = forced[step]
                elif temperature == 0:
                    token = int(torch.argmax(logits))
                else:
                    token = int(torch.multinomial(scaled.exp(), 1, generator=generator))
                sequence.append(token)
                out.append(token)
                logprobs.append(float(scaled[token]))
                if token in stops or (forced is not None and step + 1 == len(forced)):
                    break
        return out, logprobs
