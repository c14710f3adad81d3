"""Fixtures of the trainer-adapter tests: the tiny policy, an in-process gym on SQLite, and a scripted
token policy whose every output is known, so the driver's token bookkeeping can be checked exactly."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import make_settings

from gym_server.app import create_app
from gym_server.trainer_adapters.client import GymClient
from gym_server.trainer_adapters.samplers.base import SamplingParams, TokenSample

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
    from gym_server.trainer_adapters.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer: Any) -> Any:
    from gym_server.trainer_adapters.models import build_tiny_model

    return build_tiny_model(tiny_tokenizer, seed=0)


@pytest.fixture
def renderer(tiny_tokenizer: Any) -> Any:
    from gym_server.trainer_adapters.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


@pytest.fixture
async def gym_client(tmp_path: Path) -> AsyncIterator[GymClient]:
    """A `GymClient` over an in-process gym app on a temporary SQLite file."""
    settings = make_settings(f"sqlite:///{tmp_path / 'gym.db'}")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with GymClient("http://gym.test", transport=transport) as client:
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


@pytest.fixture
def policy_url(tiny_model: Any, tiny_tokenizer: Any) -> Iterator[str]:
    """The tiny model behind `create_policy_app`, served by uvicorn on a loopback port in a thread."""
    import threading
    import time

    import uvicorn
    from conftest import free_port

    from gym_server.trainer_adapters.policy_server import create_policy_app

    app = create_policy_app(tiny_model, tiny_tokenizer, name="tiny", max_batch=16)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "policy server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    app.state.policy.engine.stop()
