"""The trainer's weights, to a served vLLM policy: its LoRA adapter saved and loaded in place every step.

A full-weight update needs a transport between the trainer's and the server's devices (TRL's
`vllm_mode="server"` pushes tensors over NCCL, CUDA only). A LoRA adapter is a few MB: writing it with
`save_pretrained` and asking vLLM to reload it (`POST /v1/load_lora_adapter` with `load_inplace: true`,
the server started with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) takes tens of milliseconds here, works on
a CPU and on a GPU alike, and the very next request under the adapter's name samples with the new weights.
Every version is written to a folder of its own (`<directory>/v000003`) and the previous ones are kept
until a newer one is loaded (`keep`), so vLLM never reads a half-written file.

`logprob_probe` is the check that the update is right: the logprobs vLLM assigns a fixed prompt and
completion under the adapter (`prompt_logprobs`) against the trainer's own for the same tokens. After
each update they must agree within the bf16/fp32 tolerance and differ from the previous version's.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["LogprobProbe", "LoraSync", "SyncTiming", "WeightSyncError", "served_logprobs", "trainer_logprobs"]


class WeightSyncError(RuntimeError):
    """vLLM refused or failed to load the adapter; the message carries its answer."""


@dataclass(frozen=True)
class SyncTiming:
    """One update: the version loaded, and the seconds spent saving and loading it."""

    version: int
    save_s: float
    load_s: float

    @property
    def total_s(self) -> float:
        return self.save_s + self.load_s


@dataclass
class LoraSync:
    """Pushes a PEFT model's adapter to a vLLM server under one name, version after version.

    Args:
        base_url: the vLLM server (with or without `/v1`).
        adapter_name: the name rollouts send as `model` to sample through the adapter.
        directory: where each version's adapter is written (`v000000`, `v000001`, ...).
        keep: how many versions stay on disk (the newest; older folders are removed after a load).
        api_key: vLLM's `--api-key`, when it has one.
        timeout_s: the longest one load may take.
    """

    base_url: str
    adapter_name: str
    directory: Path
    keep: int = 2
    api_key: str | None = None
    timeout_s: float = 120.0
    version: int | None = None
    timings: list[SyncTiming] = field(default_factory=list)

    @property
    def root(self) -> str:
        root = self.base_url.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root

    def push(self, model: Any, version: int) -> SyncTiming:
        """Save `model`'s adapter as `version` and load it into vLLM in place.

        Raises:
            WeightSyncError: vLLM did not answer 200 (its message is kept), or could not be reached.
        """
        path = self.directory / f"v{version:06d}"
        started = time.perf_counter()
        if path.exists():  # a version pushed again (a resumed run): written afresh, never half-overwritten
            shutil.rmtree(path)
        model.save_pretrained(str(path))
        saved = time.perf_counter()
        body = {"lora_name": self.adapter_name, "lora_path": str(path.resolve()), "load_inplace": True}
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            answer = httpx.post(
                f"{self.root}/v1/load_lora_adapter", json=body, headers=headers, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            raise WeightSyncError(f"vLLM at {self.root} could not be reached: {exc}") from exc
        if answer.status_code != 200:
            raise WeightSyncError(
                f"vLLM refused adapter {self.adapter_name!r} version {version} "
                f"({answer.status_code}): {answer.text[:500]}"
            )
        timing = SyncTiming(version, saved - started, time.perf_counter() - saved)
        self.version = version
        self.timings.append(timing)
        self._prune()
        return timing

    def _prune(self) -> None:
        versions = sorted(p for p in self.directory.glob("v[0-9]*") if p.is_dir())
        for old in versions[: max(0, len(versions) - self.keep)]:
            shutil.rmtree(old, ignore_errors=True)


def served_logprobs(
    base_url: str,
    model: str,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    *,
    api_key: str | None = None,
    timeout_s: float = 60.0,
) -> list[float]:
    """vLLM's logprob of each completion token after the prompt, under `model` (a base or adapter name),
    read from `prompt_logprobs` of a one-token completion over prompt + completion."""
    ids = [*prompt_ids, *completion_ids]
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    root = base_url.rstrip("/").removesuffix("/v1")
    answer = httpx.post(
        f"{root}/v1/completions",
        json={"model": model, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0},
        headers=headers,
        timeout=timeout_s,
    )
    answer.raise_for_status()
    entries = answer.json()["choices"][0]["prompt_logprobs"]
    values = []
    for position in range(len(prompt_ids), len(ids)):
        entry = entries[position]
        values.append(float(entry[str(ids[position])]["logprob"]))
    return values


def trainer_logprobs(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
    """The trainer model's logprob of each completion token after the prompt (no sampling, no grad)."""
    import torch

    ids = torch.tensor([[*prompt_ids, *completion_ids]], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logps = torch.log_softmax(logits[:-1], dim=-1)
    targets = ids[0, 1:]
    picked = logps.gather(1, targets.unsqueeze(1)).squeeze(1)
    return [float(v) for v in picked[len(prompt_ids) - 1 :]]


@dataclass
class LogprobProbe:
    """After every update: vLLM's logprobs of a fixed prompt and completion against the trainer's.

    Each check appends a record to `records`: `max_abs_diff` and `mean_abs_diff`, the gap between served
    and trained logprobs (bf16 on the server, fp32 in the trainer); `changed_from_previous` and
    `trainer_changed`, the largest change of the served and of the trainer's logprobs since the previous
    check (NaN at the first). A right update moves both or neither.
    """

    base_url: str
    model: str
    prompt_ids: list[int]
    completion_ids: list[int]
    api_key: str | None = None
    records: list[dict[str, float]] = field(default_factory=list)
    _previous: tuple[list[float], list[float]] | None = field(default=None, repr=False)

    def check(self, trained: Any, version: int) -> dict[str, float]:
        served = served_logprobs(
            self.base_url, self.model, self.prompt_ids, self.completion_ids, api_key=self.api_key
        )
        own = trainer_logprobs(trained, self.prompt_ids, self.completion_ids)
        gaps = _differences(served, own)
        previous, self._previous = self._previous, (served, own)
        record = {
            "version": float(version),
            "max_abs_diff": max(gaps),
            "mean_abs_diff": sum(gaps) / len(gaps),
            "changed_from_previous": max(_differences(served, previous[0])) if previous else math.nan,
            "trainer_changed": max(_differences(own, previous[1])) if previous else math.nan,
            "served_mean": sum(served) / len(served),
            "trainer_mean": sum(own) / len(own),
        }
        self.records.append(record)
        return record


def _differences(left: Sequence[float], right: Sequence[float]) -> list[float]:
    return [abs(a - b) for a, b in zip(left, right, strict=True)]
