"""Fixtures of the trainer-adapter tests: the tiny policy, an in-process gym on SQLite, and a scripted
token policy whose every output is known, so the driver's token bookkeeping can be checked exactly."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import make_settings
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from gym_server.app import create_app
from gym_trainer.client import GymClient
from gym_trainer.samplers.base import SamplingParams, TokenSample

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _torch_single_thread() -> None:
    # A tiny model gains nothing from intra-op threads, and on a shared 2-core machine OpenMP spinning
    # makes every matmul 10x slower.
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


_torch_single_thread()


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    pytest.importorskip("transformers")
    from gym_trainer.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer: Any) -> Any:
    from gym_trainer.models import build_tiny_model

    return build_tiny_model(tiny_tokenizer, seed=0)


@pytest.fixture
def renderer(tiny_tokenizer: Any) -> Any:
    from gym_trainer.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


@pytest.fixture
async def gym_client(tmp_path: Path) -> AsyncIterator[GymClient]:
    """A `GymClient` over an in-process gym app on a temporary SQLite file."""
    settings = make_settings(f"sqlite:///{tmp_path / 'gym.db'}")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with GymClient("http://localhost", transport=transport) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


class ScriptedSampler:
    """A token sampler that answers with scripted texts, tokenized by the tiny tokenizer plus EOS.

    Each call pops the next text; logprobs are a fixed -0.5 so tests can tell them from the 0.0 the
    driver puts on environment tokens.
    """

    token_exact = True
    weight_version: str | None = "scripted-1"

    def __init__(self, tokenizer: Any, texts: Sequence[str], eos: bool = True) -> None:
        self.tokenizer = tokenizer
        self.texts = list(texts)
        self.eos = eos
        self.prompts: list[list[int]] = []

    def describe(self) -> dict[str, Any]:
        return {"kind": "scripted", "model": "scripted", "weight_version": self.weight_version}

    async def aclose(self) -> None:
        return None

    async def sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, stop_token_ids: Sequence[int]
    ) -> TokenSample:
        self.prompts.append(list(prompt_ids))
        text = self.texts.pop(0)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.eos:
            ids.append(int(self.tokenizer.eos_token_id))
        ids = ids[: params.max_tokens]
        stopped = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        return TokenSample(ids, [-0.5] * len(ids), "stop" if stopped else "length")


@pytest.fixture
def scripted() -> type[ScriptedSampler]:
    """The `ScriptedSampler` class (test modules cannot import this conftest by name)."""
    return ScriptedSampler


@dataclass
class Served:
    """An ASGI app served by uvicorn on a loopback port in a thread of this process."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        """Shut the server down: its port refuses connections afterwards, as if the process died."""
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextmanager
def serve_in_thread(app: Any) -> Iterator[Served]:
    import uvicorn
    from conftest import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    served = Served(f"http://127.0.0.1:{port}", server, threading.Thread(target=server.run, daemon=True))
    served.thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def serve() -> Callable[[Any], AbstractContextManager[Served]]:
    """`serve_in_thread`, for tests that stand up their own loopback app (a redirector, a slow policy)."""
    return serve_in_thread


@pytest.fixture
def policy_url(tiny_model: Any, tiny_tokenizer: Any) -> Iterator[str]:
    """The tiny model behind `create_policy_app`, served by uvicorn on a loopback port in a thread."""
    from gym_trainer.policy_server import create_policy_app

    app = create_policy_app(tiny_model, tiny_tokenizer, name="tiny", max_batch=16)
    with serve_in_thread(app) as served:
        yield served.url
    app.state.policy.engine.stop()


class FakeVLLM:
    """A stand-in for `vllm serve` on a GPU, which this machine does not have: vLLM's token-in
    `/v1/completions` fields (`prompt` as ids, `return_token_ids`, `logprobs`, `choices[].token_ids`,
    `logprobs.token_logprobs`), `/tokenize` and `/detokenize`, served over real HTTP on loopback.

    Completions answer from `script`, one entry per request (retries included): a text is tokenized by
    the tiny tokenizer and ends with its EOS, each token's logprob being -0.01 times its position plus
    one (so tests can tell them apart); an entry starting with "!" is a fault (see `_fault`). It
    refuses what vLLM refuses: an unknown model (404) and prompt ids outside the vocabulary (400).
    """

    def __init__(self, tokenizer: Any, models: Sequence[str] = ("base", "counter-lora")) -> None:
        from gym_trainer.chat import ChatRenderer

        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.models = set(models)
        self.script: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []  # the Authorization header of every request
        self.served: Served | None = None
        self.release = threading.Event()
        app = FastAPI()

        @app.middleware("http")
        async def note_authorization(request: Request, call_next: Any) -> Response:
            self.authorizations.append(request.headers.get("authorization"))
            response: Response = await call_next(request)
            return response

        def refuse(status: int, message: str) -> Response:
            return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            if body.get("model") not in self.models:
                return refuse(404, f"The model `{body.get('model')}` does not exist.")
            if not self._known(body.get("prompt")):
                return refuse(400, "prompt token ids out of vocabulary")
            entry = self.script.pop(0)
            if entry == "!hang":  # a request that never gets an answer (until the test ends)
                await asyncio.to_thread(self.release.wait, 60)
                entry = "!503"
            if entry.startswith("!"):
                return self._fault(entry, body)
            ids = [*tokenizer.encode(entry, add_special_tokens=False), int(tokenizer.eos_token_id)]
            return JSONResponse(self._answer(body, ids[: body["max_tokens"]], "stop"))

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Response:
            body = await request.json()
            if body.get("messages") is not None:
                text = self.renderer.render_messages(
                    body["messages"], body.get("tools"), bool(body.get("add_generation_prompt", True))
                )
                return JSONResponse({"tokens": self.renderer.encode(text)})
            tokens = tokenizer.encode(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens")))
            return JSONResponse({"tokens": list(tokens)})

        @app.post("/detokenize")
        async def detokenize(request: Request) -> Response:
            tokens = (await request.json())["tokens"]
            if not self._known(tokens):
                return refuse(400, "token ids out of vocabulary")
            return JSONResponse({"prompt": tokenizer.decode(tokens, skip_special_tokens=False)})

        self.app = app

    @property
    def url(self) -> str:
        assert self.served is not None
        return self.served.url

    def _known(self, ids: Any) -> bool:
        size = len(self.tokenizer)
        return isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < size for i in ids)

    def _answer(self, body: dict[str, Any], ids: list[int], finish: str) -> dict[str, Any]:
        logprobs: list[Any] = [-0.01 * (k + 1) for k in range(len(ids))]
        return {
            "id": f"cmpl-{len(self.requests)}",
            "object": "text_completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "text": self.tokenizer.decode(ids, skip_special_tokens=False),
                    "logprobs": {"token_logprobs": logprobs, "tokens": [f"t{i}" for i in ids]},
                    "finish_reason": finish,
                    "prompt_token_ids": body["prompt"],
                    "token_ids": ids,
                }
            ],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)},
        }

    def _fault(self, entry: str, body: dict[str, Any]) -> Response:
        """`!500`/`!503`: that status; `!garbage`: a 200 that is not JSON; `!mismatch`: fewer logprobs
        than ids; `!nan`: a null logprob; `!oov`: an id outside the vocabulary; `!empty`: no tokens;
        `!endless`: `max_tokens` tokens without an EOS (`finish_reason: length`)."""
        eos = int(self.tokenizer.eos_token_id)
        if entry in ("!500", "!503"):
            return JSONResponse({"error": {"message": "engine down"}}, status_code=int(entry[1:]))
        if entry == "!garbage":
            return PlainTextResponse("<html>upstream hiccup</html>")
        if entry == "!endless":
            x = self.tokenizer.encode("x", add_special_tokens=False)[0]
            return JSONResponse(self._answer(body, [x] * body["max_tokens"], "length"))
        ids = {"!empty": [], "!oov": [len(self.tokenizer) + 7, eos]}.get(entry, [87, eos])
        answer = self._answer(body, ids, "stop")
        logprobs = answer["choices"][0]["logprobs"]["token_logprobs"]
        if entry == "!mismatch":
            logprobs.pop()
        elif entry == "!nan":
            logprobs[0] = None
        return JSONResponse(answer)


@pytest.fixture
def fake_vllm(tiny_tokenizer: Any) -> Iterator[FakeVLLM]:
    """A `FakeVLLM` on a loopback port; `fake_vllm.served.stop()` kills it."""
    fake = FakeVLLM(tiny_tokenizer)
    with serve_in_thread(fake.app) as served:
        fake.served = served
        yield fake
        fake.release.set()
