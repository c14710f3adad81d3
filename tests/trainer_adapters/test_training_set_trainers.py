"""The exported training sets are what TRL's trainers read: one `SFTTrainer` step on an SFT export and one
`DPOTrainer` step on a preference export, with the tiny model built from a config, on the CPU.

Each file comes from `gym-server export` over a SQLite store of known multi-turn tool episodes (see
`store.training_episodes`), is loaded with `datasets` as a user would load it, and must change the
model's weights in a step whose loss is finite: the rows tokenized through the chat template with their
tools, and the trainer found its columns.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
from store.training_episodes import store_known_episodes

from gym_server.store.migrate import upgrade_database
from gym_server.store.repository import TrajectoryFilter
from gym_server.store.training_sets import export_training_set

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"),
]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gym.db'}"
    upgrade_database(url)
    store_known_episodes(url)
    return url


def _weights(model: Any) -> list[Any]:
    return [parameter.detach().clone() for parameter in model.parameters()]


def _changed(before: list[Any], model: Any) -> bool:
    import torch

    return any(
        not torch.equal(old, new.detach()) for old, new in zip(before, model.parameters(), strict=True)
    )


def _quiet(trainer: Any) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


COMMON: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "per_device_train_batch_size": 2,
    "max_steps": 1,
    "learning_rate": 1e-2,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
    "disable_tqdm": True,
    "seed": 0,
}


def test_one_sft_step_on_an_sft_export(store: str, tmp_path: Path, tiny_tokenizer: Any) -> None:
    pytest.importorskip("trl")
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from datasets import load_dataset
    from gym_trainer.models import build_tiny_model

    out = tmp_path / "sft.jsonl"
    assert (
        export_training_set(store, out, "sft", "jsonl", min_reward=0.5, where=TrajectoryFilter(run="r1")) == 2
    )
    dataset = load_dataset("json", data_files=str(out), split="train")
    assert {"messages", "tools", "trajectory_id", "reward", "policy"} <= set(dataset.column_names)

    model = build_tiny_model(tiny_tokenizer, seed=0)
    before = _weights(model)
    args = SFTConfig(output_dir=str(tmp_path / "sft-out"), max_length=1024, **COMMON)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tiny_tokenizer)
    _quiet(trainer)
    # the tools reached the chat template: the rendered system turn lists them
    tokenized: Any = trainer.train_dataset
    rendered = tiny_tokenizer.decode(tokenized[0]["input_ids"])
    assert "<tools>" in rendered and '"name": "add"' in rendered and "<tool_call>" in rendered
    trainer.train()

    assert trainer.state.global_step == 1
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 1 and math.isfinite(losses[0])
    assert _changed(before, model)


def test_one_dpo_step_on_a_preference_export(store: str, tmp_path: Path, tiny_tokenizer: Any) -> None:
    pytest.importorskip("trl")
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    from datasets import load_dataset
    from gym_trainer.models import build_tiny_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    out = tmp_path / "pairs.parquet"
    where = TrajectoryFilter(run="r1")
    assert export_training_set(store, out, "preference", "parquet", min_margin=0.25, where=where) == 2
    dataset = load_dataset("parquet", data_files=str(out), split="train")
    assert {"prompt", "chosen", "rejected", "tools", "chosen_id", "rejected_id"} <= set(dataset.column_names)

    model = build_tiny_model(tiny_tokenizer, seed=0)
    before = _weights(model)
    args = DPOConfig(output_dir=str(tmp_path / "dpo-out"), max_length=1024, **COMMON)
    # The reference model is given: TRL would otherwise load it again by the config's hub name, which a
    # model built from a config does not have.
    reference = build_tiny_model(tiny_tokenizer, seed=0)
    trainer = DPOTrainer(
        model=model, ref_model=reference, args=args, train_dataset=dataset, processing_class=tiny_tokenizer
    )
    _quiet(trainer)
    tokenized: Any = trainer.train_dataset
    first = tokenized[0]
    assert "<tools>" in tiny_tokenizer.decode(first["prompt_ids"])
    assert "<tool_call>" in tiny_tokenizer.decode(first["chosen_ids"])
    trainer.train()

    assert trainer.state.global_step == 1
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 1 and math.isfinite(losses[0])
    assert _changed(before, model)
