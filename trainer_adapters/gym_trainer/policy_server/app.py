"""The local policy server: an OpenAI-compatible stand-in for `vllm serve`, backed by transformers.

It exists so the same adapter code that talks to vLLM runs on a CPU in tests and demos, and on one GPU
where vLLM is not installed: it samples wherever the model it is given lives (`GET /health` says where). The
fields it implements have vLLM's names and shapes:

- `GET /v1/models`;
- `POST /v1/completions`: `prompt` as text or token ids (or a batch), `max_tokens`, `temperature`,
  `top_p`, `seed`, `n`, `logprobs` (processed logprobs of the sampled tokens in
  `choices[].logprobs.token_logprobs`, `tokens`, `top_logprobs`, `text_offset`) and
  `return_token_ids` (`choices[].prompt_token_ids`, `choices[].token_ids`; the end-of-turn token is
  included in `token_ids` when sampling stopped on it, as vLLM does);
- `POST /v1/chat/completions`: messages and tools rendered by the chat template, Hermes tool calls
  parsed into `message.tool_calls` (`finish_reason: "tool_calls"`), `logprobs`, `return_token_ids`
  (top-level `prompt_token_ids`, on the first chunk when streamed; `choices[].token_ids`), and
  `stream` (the finished completion as server-sent chunks; `stream_options.include_usage` adds the
  usage chunk);
- `POST /tokenize` (a `prompt`, or `messages` + `tools` through the chat template) and
  `POST /detokenize`, so a driver without the tokenizer (the gym's `POST /v1/rollouts`) can render.

Concurrent requests share batches through one `BatchingEngine`. Errors are OpenAI-shaped
(`{"error": {"message", "type", "code"}}`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from gym_trainer.chat import ChatRenderer
from gym_trainer.generation import BatchingEngine, GenerationOutput, GenerationRequest
from gym_trainer.policy_server.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from gym_trainer.toolcalls import parse_tool_calls

__all__ = ["PolicyServerError", "create_policy_app"]


class PolicyServerError(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


class _Policy:
    """The model, tokenizer and engine behind the routes."""

    def __init__(self, model: Any, tokenizer: Any, name: str, max_batch: int, max_context: int) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.vocab_size = len(tokenizer)
        self.max_context = max_context
        self.engine = BatchingEngine(model, int(tokenizer.pad_token_id), max_batch=max_batch)
        self.created = int(time.time())

    def check_model(self, requested: str | None) -> None:
        if requested not in (None, "", self.name):
            raise PolicyServerError(f"The model `{requested}` does not exist.", 404, "model_not_found")

    def check_prompt(self, ids: Sequence[int], max_tokens: int) -> None:
        if not ids:
            raise PolicyServerError("the prompt is empty")
        if any(not 0 <= token < self.vocab_size for token in ids):
            raise PolicyServerError(f"prompt token ids must be in [0, {self.vocab_size})")
        if len(ids) + max_tokens > self.max_context:
            raise PolicyServerError(
                f"this model's maximum context length is {self.max_context} tokens; the prompt has "
                f"{len(ids)} and max_tokens asks for {max_tokens}"
            )

    async def sample(
        self, ids: list[int], body: CompletionRequest | ChatRequest, max_tokens: int, index: int
    ) -> GenerationOutput:
        seed = None if body.seed is None else body.seed + index
        stops = (
            body.stop_token_ids if body.stop_token_ids is not None else sorted(self.renderer.eos_token_ids)
        )
        request = GenerationRequest(ids, max_tokens, body.temperature, body.top_p, seed, tuple(stops))
        return await self.engine.generate(request)

    def token_text(self, token: int) -> str:
        return str(self.tokenizer.decode([token], skip_special_tokens=False))


def _error(message: str, status: int, code: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": code, "code": status}, "object": "error"}, status_code=status
    )


def _prompts(policy: _Policy, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        return [policy.renderer.encode(prompt)]
    if prompt and all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    return [policy.renderer.encode(p) if isinstance(p, str) else list(p) for p in prompt]


def _completion_logprobs(policy: _Policy, out: GenerationOutput) -> dict[str, Any]:
    tokens = [policy.token_text(t) for t in out.token_ids]
    offsets, position = [], 0
    for text in tokens:
        offsets.append(position)
        position += len(text)
    return {
        "text_offset": offsets,
        "token_logprobs": out.logprobs,
        "tokens": tokens,
        "top_logprobs": [{text: lp} for text, lp in zip(tokens, out.logprobs, strict=True)],
    }


def _finish(out: GenerationOutput) -> str:
    return "length" if out.finish_reason == "length" else "stop"


async def _complete(policy: _Policy, body: CompletionRequest) -> dict[str, Any]:
    policy.check_model(body.model)
    if body.echo:
        raise PolicyServerError("echo is not supported by the local policy server")
    max_tokens = body.max_tokens or 16
    prompts = _prompts(policy, body.prompt)
    for ids in prompts:
        policy.check_prompt(ids, max_tokens)
    jobs = [policy.sample(ids, body, max_tokens, k) for ids in prompts for k in range(body.n)]
    outputs = await asyncio.gather(*jobs)
    choices = []
    for index, out in enumerate(outputs):
        prompt_ids = prompts[index // body.n]
        choice: dict[str, Any] = {
            "index": index,
            "text": policy.tokenizer.decode(out.token_ids, skip_special_tokens=body.skip_special_tokens),
            "logprobs": _completion_logprobs(policy, out) if body.logprobs is not None else None,
            "finish_reason": _finish(out),
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        if body.return_token_ids:
            choice["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = out.token_ids
        choices.append(choice)
    prompt_tokens = sum(len(p) for p in prompts) * body.n
    completion_tokens = sum(len(out.token_ids) for out in outputs)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": policy.name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def _chat(policy: _Policy, body: ChatRequest) -> dict[str, Any]:
    policy.check_model(body.model)
    tools = None if body.tool_choice == "none" else body.tools
    prompt = policy.renderer.render_prompt(body.messages, tools)
    max_tokens = body.max_completion_tokens or body.max_tokens or max(1, policy.max_context - len(prompt.ids))
    policy.check_prompt(prompt.ids, max_tokens)
    outputs = await asyncio.gather(*(policy.sample(prompt.ids, body, max_tokens, k) for k in range(body.n)))
    choices = []
    for index, out in enumerate(outputs):
        text = policy.renderer.completion_text(out.token_ids)
        parsed = parse_tool_calls(text, call_id_prefix=f"call_{uuid.uuid4().hex[:8]}_") if tools else None
        if parsed is not None and parsed.tool_calls:
            message = parsed.to_message()
            finish = "tool_calls" if out.finish_reason == "stop" else "length"
        else:
            message, finish = {"role": "assistant", "content": text}, _finish(out)
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": finish,
            "logprobs": None,
        }
        if body.logprobs:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": policy.token_text(t),
                        "logprob": lp,
                        "bytes": list(policy.token_text(t).encode()),
                        "top_logprobs": [],
                    }
                    for t, lp in zip(out.token_ids, out.logprobs, strict=True)
                ]
            }
        if body.return_token_ids:
            choice["token_ids"] = out.token_ids
        choices.append(choice)
    completion_tokens = sum(len(out.token_ids) for out in outputs)
    answer: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": policy.name,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt.ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt.ids) + completion_tokens,
        },
    }
    if body.return_token_ids:
        answer["prompt_token_ids"] = prompt.ids
    return answer


def _chat_events(answer: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A finished chat completion as OpenAI's stream: per choice one chunk with the whole message as
    its delta (tool calls indexed, as stream deltas are), one with its finish reason; then the usage
    chunk when asked for, and `[DONE]`. Sampling is not incremental, so nothing arrives earlier."""
    head = {key: answer[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def event(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    for choice in answer["choices"]:
        message = choice["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        index = choice["index"]
        first = {"index": index, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}
        if "token_ids" in choice:
            first["token_ids"] = choice["token_ids"]
        opening = head
        if index == 0 and "prompt_token_ids" in answer:  # as vLLM streams it: on the first chunk
            opening = head | {"prompt_token_ids": answer["prompt_token_ids"]}
        yield event(opening | {"choices": [first]})
        last = {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        yield event(head | {"choices": [last]})
    if include_usage:
        yield event(head | {"choices": [], "usage": answer["usage"]})
    yield b"data: [DONE]\n\n"


router = APIRouter()


def _policy_of(request: Request) -> _Policy:
    return cast(_Policy, request.app.state.policy)


PolicyDep = Annotated[_Policy, Depends(_policy_of)]


@router.get("/health")
async def health(policy: PolicyDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "batches": policy.engine.batches,
        "requests": policy.engine.requests,
        "device": policy.engine.device,
    }


@router.get("/v1/models")
async def models(policy: PolicyDep) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": policy.name,
                "object": "model",
                "created": policy.created,
                "owned_by": "gym-server",
                "max_model_len": policy.max_context,
            }
        ],
    }


@router.post("/v1/completions")
async def completions(body: CompletionRequest, policy: PolicyDep) -> Any:
    reason = body.unsupported()
    if reason:
        raise PolicyServerError(reason)
    return await _complete(policy, body)


@router.post("/v1/chat/completions")
async def chat(body: ChatRequest, policy: PolicyDep) -> Any:
    reason = body.unsupported()
    if reason:
        raise PolicyServerError(reason)
    answer = await _chat(policy, body)
    if not body.stream:
        return answer
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    return StreamingResponse(_chat_events(answer, include_usage), media_type="text/event-stream")


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, policy: PolicyDep) -> dict[str, Any]:
    """vLLM's `/tokenize`: how rollout drivers without a local tokenizer render token-exactly."""
    policy.check_model(body.model)
    if body.messages is not None:
        text = policy.renderer.render_messages(body.messages, body.tools, body.add_generation_prompt)
    elif body.prompt is not None:
        text = body.prompt
    else:
        raise PolicyServerError("give prompt or messages")
    ids = policy.renderer.encode(text)
    return {"count": len(ids), "max_model_len": policy.max_context, "tokens": ids}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, policy: PolicyDep) -> dict[str, Any]:
    policy.check_model(body.model)
    if any(not 0 <= token < policy.vocab_size for token in body.tokens):
        raise PolicyServerError(f"token ids must be in [0, {policy.vocab_size})")
    return {"prompt": policy.renderer.decode(body.tokens)}


async def _policy_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PolicyServerError)
    return _error(exc.message, exc.status, exc.code)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return _error(problems, 400, "invalid_request_error")


async def _crash(request: Request, exc: Exception) -> JSONResponse:
    return _error(f"generation failed: {type(exc).__name__}", 500, "internal_error")


def create_policy_app(
    model: Any, tokenizer: Any, *, name: str = "tiny", max_batch: int = 32, max_context: int | None = None
) -> FastAPI:
    """Build the policy server around a loaded model and tokenizer (see `models.load_policy`)."""
    context = max_context or int(getattr(model.config, "max_position_embeddings", 4096))
    app = FastAPI(title="gym-server policy", description=__doc__)
    app.state.policy = _Policy(model, tokenizer, name, max_batch, context)
    app.add_exception_handler(PolicyServerError, _policy_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(Exception, _crash)
    app.include_router(router)
    return app
