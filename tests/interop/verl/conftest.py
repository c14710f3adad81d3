"""Fixtures for the verl peer: real `gym-server serve` processes (tests/interop/gym_servers.py), verl's
real agent-loop classes, the tiny model built from a config, and `CpuServerManager` in place of verl's
GPU-only vLLM/SGLang server manager (the only stand-in)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gym_servers import Gym, anyio_backend, free_port, gym, gym_with

__all__ = ["Gym", "agent_loop", "anyio_backend", "free_port", "gym", "gym_with", "tiny"]

AGENT_LOOP_YAML = Path(__file__).resolve().parents[3] / "examples" / "verl" / "agent_loop.yaml"


def pytest_report_header() -> str:
    return f"verl {version('verl')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """The gym's tiny policy (a 2-layer Llama built from a config, byte-level tokenizer)."""
    from gym_trainer.models import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    return tokenizer, build_tiny_model(tokenizer)


def trainer_config(prompt_length: int = 1024, response_length: int = 512) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {"path": "tiny"},
                "rollout": {"prompt_length": prompt_length, "response_length": response_length},
            },
            "data": {},
        }
    )


@pytest.fixture
def agent_loop() -> Callable[..., Any]:
    """Build the agent loop a verl worker would: the entry of examples/verl/agent_loop.yaml loaded as
    `actor_rollout_ref.rollout.agent.agent_loop_config_path` loads it, instantiated with hydra and the
    arguments `AgentLoopWorker._run_agent_loop` passes."""

    def build(server_manager: Any, tokenizer: Any, gym_url: str, **overrides: Any) -> Any:
        import hydra
        from omegaconf import OmegaConf
        from verl.experimental.agent_loop.agent_loop import (
            DictConfigWrap,
            ToolListWrap,
            _agent_loop_registry,
        )
        from verl.utils.dataset.rl_dataset import RLHFDataset

        for entry in OmegaConf.load(AGENT_LOOP_YAML):
            _agent_loop_registry[entry.name] = entry
        entry = OmegaConf.merge(_agent_loop_registry["gym_agent"], {"gym_url": gym_url, **overrides})
        config = trainer_config()
        return hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=server_manager,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )

    return build
