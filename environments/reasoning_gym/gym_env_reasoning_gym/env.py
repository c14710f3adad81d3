"""`reasoning_gym/<task>`: reasoning-gym's procedural generators as a family of single-turn environments.

One `Environment` class per generator that passed the audit (`audit.py`, its verdicts committed in
`audit.json`), named `reasoning_gym/<generator>` and registered together by the entry-point callable
`environments()`, which reads that file and never imports reasoning-gym. Tasks are not read from JSONL:
they are generated on demand, deterministically, from the task id:

    <generator>-l<level>-<split>-<index:05d>        e.g. leg_counting-l0-train-00042

is item `index` of reasoning-gym's dataset for that generator, configured by its curriculum at `level`
and seeded with `split_seed(generator, split, level)` (SHA-256 of the three, so train and validation never
share a seed, and every process, machine and Python version generates the same task). The catalog lists
`SPLIT_SIZES` tasks per split at the class's `level`; `get()` also accepts ids at any other level the
audit offers (`max_level`), which is how a trainer climbs the curriculum without another class.

Curriculum: `level` (class attribute, default 0) is reasoning-gym's global curriculum level: 0 is its
easiest setting, each step widens every attribute's range (more animals, bigger numbers, more people on
the island...). `make_environment(generator, level=n)` builds a class serving level n by default, named
`reasoning_gym/<generator>-l<n>`. The level is in every task's public metadata.

Scoring (`verify`): the answer is the content of the response's `<answer>` tags (the system prompt asks
for them), else its last `\\boxed{}` or "the answer is" phrase; several *different* answer blocks are
hedging and score 0. The answer goes to the generator's own `score_answer` (reasoning-gym's scorer for
that task), clamped to [0, 1]. One rule is stricter than reasoning-gym's: its *default* scorer, used by
the generators that define none, gives `len(reference) / len(answer)` to any answer that merely contains
the reference, so `1 2 3 ... 300` would earn credit on a counting task and spraying would beat committing
to a wrong number. Here such a containment-only match scores 0 (`strict_containment = True`; set it
False on a subclass to get reasoning-gym's behaviour back). The same holds for every other scorer's
partial credit when the answer holds the reference among other text (`word_sorting` paid 0.86 for
`<answer>GOLD or WRONG</answer>`, `sudoku` 0.41): reference-plus-more is a hedge and scores 0.

A second rule closes answers in the wrong form: two scorers pay partial credit for an answer the task
refuses. `fraction_simplification` pays 0.1 for the question's own unsimplified fraction (and 0.05, 0.01
for any other text), `prime_factorization` 0.5 for any product equal to the number, the number itself
included (and 0.01 for anything). For those generators (`FORM_STRICT_GENERATORS`) only full credit
counts (`strict_form = True`; False restores reasoning-gym's scores).

| component | value |
|---|---|
| `correct` | the generator's score in [0, 1]; **the reward** |
| `extracted` | 1.0 when an answer was found |
| `format` | 1.0 when it was in `<answer>` tags as asked (informational) |
| `hedged` | 1.0 when several different answers were given (scored 0) |

reasoning-gym is an optional dependency (`pip install 'gym-server[reasoning-gym]'`, Apache-2.0): without
it `environments()` raises `MissingExtra`, the family is absent from the catalog, and asking for one of its
environments answers with the pip command that installs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import multiprocessing
import os
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from gym_server.core.extras import EXTRA_OF_MODULE, MissingExtra
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Dataset, Task, TaskFieldError
from gym_verifiers.format import MAX_CANDIDATES, MAX_TEXT_CHARS, extract_tagged, final_answer

from .task_cache import CHUNK_SIZE, TaskCache, cache_key

__all__ = [
    "AUDIT_FILE",
    "CURATED",
    "DESCRIPTIONS",
    "FORM_STRICT_GENERATORS",
    "SPLIT_SIZES",
    "SYSTEM_PROMPT",
    "ReasoningGymDataset",
    "ReasoningGymEnv",
    "audited",
    "environment_class",
    "environments",
    "generators",
    "make_environment",
    "max_level",
    "parse_task_id",
    "split_seed",
    "task_id",
]

log = logging.getLogger(__name__)

# The first sixteen, chosen by hand (fast, short checkable answers); their descriptions are ours, every
# other generator's is its dataset class's docstring, as the audit records it.
DESCRIPTIONS: dict[str, str] = {
    "base_conversion": "Convert a number between bases.",
    "basic_arithmetic": "Evaluate an arithmetic expression.",
    "caesar_cipher": "Decrypt a Caesar-shifted sentence.",
    "chain_sum": "Add and subtract a chain of integers.",
    "count_bits": "Count the 1 bits in an integer's binary form.",
    "family_relationships": "Name the relationship between two people of a family tree.",
    "fraction_simplification": "Reduce a fraction to lowest terms.",
    "gcd": "Greatest common divisor of several integers.",
    "knights_knaves": "Decide who tells the truth on an island of knights and knaves.",
    "lcm": "Least common multiple of several integers.",
    "leg_counting": "Count the legs of a list of animals.",
    "letter_counting": "Count a letter's occurrences in a text.",
    "number_sorting": "Sort a list of numbers.",
    "prime_factorization": "Factor an integer into primes.",
    "spell_backward": "Spell a word backward.",
    "word_sorting": "Sort words by ASCII/Unicode order.",
}
CURATED = frozenset(DESCRIPTIONS)
AUDIT_FILE = Path(__file__).resolve().with_name("audit.json")
# Generators whose scorer pays partial credit for an answer in a form the task refuses (see the docstring).
FORM_STRICT_GENERATORS = frozenset({"fraction_simplification", "prime_factorization"})
SPLIT_SIZES: dict[str, int] = {"train": 1000, "validation": 100}
MAX_ANSWER_CHARS = 10_000  # or 4x the reference: longer answers are refused (some scorers are superlinear)
SHOWN_ANSWER_CHARS = 200
_ENTRY_CACHE_SIZE = 4096
# Missing chunks are generated in worker processes when the estimate (the first task's time times the
# tasks to make) passes this; below it, starting the workers (about 2 s each) would cost more than it saves.
PARALLEL_AFTER_S = 5.0
MAX_WORKERS = 8

# reasoning-gym's "default" system prompt (reasoning_gym.utils.SYSTEM_PROMPTS), copied so the catalog
# never needs the package imported.
SYSTEM_PROMPT = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear and "
    "specific manner.\nOnce you have thought about the reasoning process, provide the answer in the "
    "following format:\n<answer>answer here</answer>\nDo not explain your reasoning inside the answer "
    "tags, provide only the final answer. When an example is provided, you should strictly follow the "
    "format of the output/answer in that example.\n"
)

_TASK_ID = re.compile(r"^(?P<generator>[a-z0-9_]+)-l(?P<level>\d{1,3})-(?P<split>[a-z]+)-(?P<index>\d{5,9})$")


def task_id(generator: str, level: int, split: str, index: int) -> str:
    """The id of item `index` of `split` at curriculum `level`."""
    return f"{generator}-l{level}-{split}-{index:05d}"


def parse_task_id(value: str) -> tuple[str, int, str, int] | None:
    """(generator, level, split, index) of a generated task's id, or None for any other id."""
    match = _TASK_ID.match(value)
    if match is None:
        return None
    return match["generator"], int(match["level"]), match["split"], int(match["index"])


def split_seed(generator: str, split: str, level: int) -> int:
    """The reasoning-gym dataset seed of one split at one level (32 bits of a SHA-256)."""
    digest = hashlib.sha256(f"reasoning_gym/{generator}/{split}/l{level}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _rg() -> Any:
    """reasoning-gym's factory module, imported on first use (it takes about a second).

    The package first: it registers every generator and curriculum as it imports. While another thread
    (the start-up warm-up) is still importing it, asking for the package waits for that import to end,
    whereas `reasoning_gym.factory` alone is already loaded and would show half-filled registries.
    """
    importlib.import_module("reasoning_gym")
    return importlib.import_module("reasoning_gym.factory")


@cache
def audited() -> dict[str, dict[str, Any]]:
    """The audit's verdict per generator, from the committed `audit.json` (empty when it is missing)."""
    if not AUDIT_FILE.exists():
        return {}
    document = json.loads(AUDIT_FILE.read_text(encoding="utf-8"))
    return {str(name): dict(verdict) for name, verdict in document.get("generators", {}).items()}


def generators() -> list[str]:
    """The generators offered: those that passed the audit, sorted."""
    return sorted(name for name, verdict in audited().items() if verdict.get("passed"))


def max_level(generator: str) -> int:
    """The highest curriculum level offered: the highest up to which reasoning-gym accepts the
    configuration and the audit's gold and determinism checks passed (0 for a generator not offered).

    Some curricula define levels their own config validation refuses (caesar_cipher past 1): those, and
    everything above them, are not offered.
    """
    return int(audited().get(generator, {}).get("max_level", 0))


def _plain(value: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of reasoning-gym metadata (tuples, sets and numpy scalars made plain)."""
    if depth > 20:
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        item = getattr(value, "item", None)  # numpy's str_ and float64 subclass the builtins
        return item() if callable(item) else value
    if isinstance(value, Mapping):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(item, depth + 1) for item in value), key=str)
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item(), depth + 1)
    return str(value)


class ReasoningGymDataset(Dataset):
    """The tasks of one generator, generated from their ids instead of read from JSONL files.

    Splits are listed at `level`; `get()` serves any level of the generator's curriculum. Generated
    entries (reasoning-gym's dicts, which its scorers need verbatim) are cached, at most 4096 of them.
    Listed tasks (`task_range`, `tasks`) go through `cache`, a disk cache of whole chunks of 100
    (`task_cache.py`): generated once per machine, in worker processes when that is worth it.
    """

    def __init__(
        self,
        generator: str,
        level: int = 0,
        sizes: Mapping[str, int] = SPLIT_SIZES,
        *,
        levels: int | None = None,
        cache: TaskCache | None = None,
    ) -> None:
        super().__init__(f"reasoning_gym/{generator}", root=Path(__file__).resolve().parent)
        self.generator = generator
        self.level = level
        self.top_level = levels  # the highest level served; None: the audit's max_level
        self.sizes = dict(sizes)
        self.cache = cache if cache is not None else TaskCache()
        self._lock = threading.Lock()
        self._filling = threading.Lock()  # one thread generates missing chunks; the others wait, then read
        self._datasets: dict[tuple[str, int], Any] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        self._split_tasks: dict[str, list[Task]] = {}

    def __repr__(self) -> str:
        return f"ReasoningGymDataset({self.generator!r}, level={self.level}, sizes={self.sizes})"

    def split_sizes(self) -> dict[str, int]:
        return dict(self.sizes)

    def tasks(self, split: str | None = None) -> list[Task]:
        if split is None:
            return [task for name in self.sizes for task in self.tasks(name)]
        if split not in self.sizes:
            return []
        with self._lock:
            cached = self._split_tasks.get(split)
        if cached is None:
            cached = self.task_range(split, 0, self.sizes[split])
            with self._lock:
                self._split_tasks[split] = cached
        return cached

    def task_at(self, split: str, index: int) -> Task:
        """Task `index` of `split` at the class's level, generated alone (not the whole split)."""
        return self._task(self.level, split, index)

    def task_range(self, split: str, start: int, stop: int) -> list[Task]:
        """Tasks `start` up to `stop` of `split` at the class's level, as `task_at` makes them.

        Chunks on disk are read; chunks the range covers whole and the disk lacks are generated (in
        worker processes when that is worth it, see `PARALLEL_AFTER_S`) and stored; the ends of a range
        that cover part of a missing chunk are generated alone and not stored, so a small page never
        pays for a whole chunk.
        """
        start, stop = max(0, start), min(stop, self.sizes.get(split, 0))
        if start >= stop:
            return []
        key = self._cache_key(split)
        pieces: dict[int, list[Task]] = {}  # chunk -> its tasks, or the part of them asked for
        missing: list[int] = []
        for chunk in range(start // CHUNK_SIZE, (stop - 1) // CHUNK_SIZE + 1):
            indices = self._chunk_indices(split, chunk)
            cached = self.cache.read(self.generator, key, split, chunk, self._ids(split, indices))
            if cached is not None:
                pieces[chunk] = cached[max(start, indices.start) - indices.start : stop - indices.start]
            elif start <= indices.start and indices.stop <= stop:
                missing.append(chunk)
            else:
                wanted = range(max(start, indices.start), min(stop, indices.stop))
                pieces[chunk] = [self._task(self.level, split, index) for index in wanted]
        if missing:
            pieces.update(self._fill(split, key, missing))
        return [task for chunk in sorted(pieces) for task in pieces[chunk]]

    def _chunk_indices(self, split: str, chunk: int) -> range:
        return range(chunk * CHUNK_SIZE, min(self.sizes.get(split, 0), (chunk + 1) * CHUNK_SIZE))

    def _ids(self, split: str, indices: range) -> list[str]:
        return [task_id(self.generator, self.level, split, index) for index in indices]

    def _cache_key(self, split: str) -> str:
        """What decides a split's tasks: generator, level, split, the dataset's configuration (its seed
        among it), reasoning-gym's version and this module's source."""
        config = self._dataset(self.level, split).config
        dataclass = dataclasses.is_dataclass(config) and not isinstance(config, type)
        fields = dataclasses.asdict(config) if dataclass else vars(config)
        return cache_key(self.generator, self.level, split, _plain(fields), _rg_version(), _module_hash())

    def _fill(self, split: str, key: str, chunks: list[int]) -> dict[int, list[Task]]:
        """Whole chunks missing from the disk: generated and stored (one filler per dataset at a time)."""
        with self._filling:
            found: dict[int, list[Task]] = {}
            for chunk in chunks:  # another thread may have filled them while this one waited
                ids = self._ids(split, self._chunk_indices(split, chunk))
                cached = self.cache.read(self.generator, key, split, chunk, ids)
                if cached is not None:
                    found[chunk] = cached
            generated = self._generate(split, [chunk for chunk in chunks if chunk not in found])
            for chunk, tasks in generated.items():
                self.cache.write(self.generator, key, split, chunk, tasks)
            return found | generated

    def _generate(self, split: str, chunks: list[int]) -> dict[int, list[Task]]:
        """The chunks' tasks: in this process, or in worker processes when the first task's time says
        the rest would take longer than `PARALLEL_AFTER_S` and the machine has more than one core."""
        if not chunks:
            return {}
        self._dataset(self.level, split)  # built before the clock starts: its cost is paid once
        first = self._chunk_indices(split, chunks[0])
        clock = time.perf_counter()
        head = self._task(self.level, split, first.start)
        estimate = (time.perf_counter() - clock) * sum(len(self._chunk_indices(split, c)) for c in chunks)
        workers = min(MAX_WORKERS, len(chunks), _cpus())
        if workers > 1 and estimate > PARALLEL_AFTER_S:
            try:
                return self._generate_in_workers(split, chunks, workers)
            except (BrokenProcessPool, OSError) as exc:
                log.warning("generating %s's tasks in this process: the workers failed (%s)", self.name, exc)
        generated = {
            chunk: [self._task(self.level, split, i) for i in self._chunk_indices(split, chunk)]
            for chunk in chunks[1:]
        }
        rest = [self._task(self.level, split, index) for index in first[1:]]
        return {chunks[0]: [head, *rest], **generated}

    def _generate_in_workers(self, split: str, chunks: list[int], workers: int) -> dict[int, list[Task]]:
        """One chunk a job, in spawned processes (a fork of a threaded server could deadlock)."""
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            jobs = {
                chunk: pool.submit(
                    _chunk_documents, self.generator, self.level, self.sizes, self.top_level, split, chunk
                )
                for chunk in chunks
            }
            return {
                chunk: [Task.model_validate(item) for item in job.result()] for chunk, job in jobs.items()
            }

    def get(self, task_id: str) -> Task | None:
        parsed = parse_task_id(task_id)
        if parsed is None:
            return None
        generator, level, split, index = parsed
        if generator != self.generator or split not in self.sizes or index >= self.sizes[split]:
            return None
        top = max_level(generator) if self.top_level is None else self.top_level
        if level > top:
            return None
        return self._task(level, split, index)

    def files(self) -> list[Path]:
        """The generator's source files: part of the environment's version, as data files would be."""
        dataset_cls, _ = _rg().DATASETS[self.generator]
        base = importlib.import_module("reasoning_gym.dataset")
        return [Path(inspect.getfile(dataset_cls)), Path(str(base.__file__))]

    def _load(self) -> dict[str, list[Task]]:
        return {split: self.tasks(split) for split in self.sizes}

    def entry(self, task: Task) -> dict[str, Any] | None:
        """reasoning-gym's own item for a generated task (what its scorer expects), or None."""
        parsed = parse_task_id(task.id)
        if parsed is None or parsed[0] != self.generator or parsed[2] not in self.sizes:
            return None
        return self._entry(*parsed[1:])

    def _entry(self, level: int, split: str, index: int) -> dict[str, Any]:
        key = task_id(self.generator, level, split, index)
        with self._lock:
            cached = self._entries.get(key)
        if cached is not None:
            return cached
        item: dict[str, Any] = self._dataset(level, split)[index]
        with self._lock:
            if len(self._entries) >= _ENTRY_CACHE_SIZE:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = item
        return item

    def scorer(self) -> Any:
        """The generator's `score_answer`, bound to a dataset at this level."""
        return self._dataset(self.level, next(iter(self.sizes))).score_answer

    def _dataset(self, level: int, split: str) -> Any:
        key = (split, level)
        with self._lock:
            dataset = self._datasets.get(key)
        if dataset is None:
            rg = _rg()
            seed, size = split_seed(self.generator, split, level), self.sizes.get(split, 1)
            curriculum = rg.create_curriculum(self.generator)
            curriculum.set_global_level(level)
            config = curriculum.generate_configuration({"seed": seed, "size": size})
            dataset_cls, _ = rg.DATASETS[self.generator]
            dataset = dataset_cls(config=config)
            with self._lock:
                dataset = self._datasets.setdefault(key, dataset)
        return dataset

    def _task(self, level: int, split: str, index: int) -> Task:
        identifier = task_id(self.generator, level, split, index)
        item = self._entry(level, split, index)
        metadata = dict(item.get("metadata") or {})
        return Task(
            id=identifier,
            prompt=str(item["question"]),
            answer={"answer": str(item["answer"]), "metadata": _plain(metadata)},
            metadata={
                "source": "reasoning_gym",
                "generator": self.generator,
                "level": level,
                "split": split,
                "index": index,
                "difficulty": _plain(metadata.get("difficulty", {})),
            },
        )


def _chunk_documents(
    generator: str, level: int, sizes: dict[str, int], levels: int | None, split: str, chunk: int
) -> list[dict[str, Any]]:
    """A worker process's job: one chunk's tasks as JSON-ready dicts (what the parent validates back)."""
    dataset = ReasoningGymDataset(generator, level, sizes, levels=levels)
    indices = dataset._chunk_indices(split, chunk)
    return [dataset._task(level, split, index).model_dump(mode="json") for index in indices]


def _cpus() -> int:
    """The cores this process may run on (what a pool of workers can use)."""
    return len(os.sched_getaffinity(0))


@cache
def _rg_version() -> str:
    return importlib.metadata.version("reasoning-gym")


@cache
def _module_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


class ReasoningGymEnv(Environment):
    """Base of the family: one generator's tasks, one assistant turn, the generator's own scorer.

    Subclasses set `generator` (and `name`); `make_environment()` builds them.
    """

    generator: ClassVar[str] = ""
    level: ClassVar[int] = 0
    top_level: ClassVar[int | None] = None  # the highest level served by task id; None: the audit's
    split_sizes: ClassVar[dict[str, int]] = SPLIT_SIZES
    strict_containment: ClassVar[bool] = True
    strict_form: ClassVar[bool] = True
    multi_turn = False
    max_turns = 1
    reward_type = "the generator's scorer, 0..1 (partial credit on some)"
    system_prompt = SYSTEM_PROMPT
    fork_mode = ForkMode.REPLAY  # single turn: a fork is a fresh start, which a replay makes at no cost

    async def on_assistant(
        self, message: dict[str, Any], *, tool_timeout_s: float, max_tool_calls: int
    ) -> list[dict[str, Any]]:
        """The first assistant message is the answer, whatever it holds: there are no tools."""
        self.finish("answered")
        return []

    @classmethod
    def dataset(cls) -> Dataset:
        return cls.rg_dataset()

    def reference_solution(self) -> list[dict[str, Any]]:
        """The generator's reference answer in `<answer>` tags (what the audit scores 1 at every level)."""
        return [{"role": "assistant", "content": f"<answer>{_reference(self.task)}</answer>"}]

    @classmethod
    def check_task(cls, task: Task) -> None:
        """An ad-hoc task's answer is the reference (text or a number), or reasoning-gym's own entry
        `{"answer": ..., "metadata": {...}}` for the scorers that need its metadata."""
        answer = task.answer
        if isinstance(answer, Mapping):
            answer = answer.get("answer")
        if not ((isinstance(answer, str) and answer.strip()) or type(answer) in (int, float)):
            raise TaskFieldError(
                [("answer", 'must be the reference (text or a number) or {"answer": ..., "metadata": {...}}')]
            )

    @classmethod
    def rg_dataset(cls) -> ReasoningGymDataset:
        cached = cls.__dict__.get("_rg_dataset")
        if not isinstance(cached, ReasoningGymDataset):
            cached = ReasoningGymDataset(cls.generator, cls.level, cls.split_sizes, levels=cls.top_level)
            cls._rg_dataset = cached  # type: ignore[attr-defined]
        return cached

    @classmethod
    def resolved_verifier_version(cls) -> str:
        """A hash of this module (extraction and rules) and the generator's scorer source."""
        if cls.verifier_version:
            return cls.verifier_version
        return content_hash([Path(__file__), *cls.rg_dataset().files()])

    async def verify(self) -> VerifyResult:
        response = self.final_answer()
        components = {"correct": 0.0, "extracted": 0.0, "format": 0.0, "hedged": 0.0}
        info: dict[str, Any] = {"generator": self.generator, "level": self.task.metadata.get("level")}
        if len(response) > MAX_TEXT_CHARS:
            return _result(0.0, components, info, f"response longer than {MAX_TEXT_CHARS} characters")
        tagged = [answer for answer in extract_tagged(response) if answer]
        candidates = _distinct(tagged) if tagged else final_answer(response).candidates
        if not candidates:
            return _result(0.0, components, info, "no answer found; put it in <answer></answer> tags")
        components["extracted"] = 1.0
        components["format"] = float(bool(tagged))
        if len(candidates) > 1:
            components["hedged"] = 1.0
            shown = ", ".join(repr(c[:20]) for c in candidates[:MAX_CANDIDATES])
            return _result(0.0, components, info, f"hedged: {len(candidates)} different answers ({shown})")
        answer = candidates[0]
        info["answer"] = answer[:SHOWN_ANSWER_CHARS]
        limit = max(MAX_ANSWER_CHARS, 4 * len(str(_reference(self.task))))
        if len(answer) > limit:
            return _result(0.0, components, info, f"answer longer than {limit} characters; refused unscored")
        # In a thread: reasoning-gym's scorers are third-party code of any cost (sympy parsing, puzzle
        # solvers), and the first score of a level builds its generator.
        return await asyncio.to_thread(self._score, answer, components, info)

    def _score(self, answer: str, components: dict[str, float], info: dict[str, Any]) -> VerifyResult:
        dataset = self.rg_dataset()
        entry = dataset.entry(self.task)
        generated = entry is not None
        if entry is None:  # an ad-hoc task: its answer carries the reference (and metadata) itself
            reference = self.task.answer
            if isinstance(reference, Mapping):
                entry = {"question": self.task.prompt, **reference}
            else:
                entry = {"question": self.task.prompt, "answer": str(reference), "metadata": {}}
        try:
            raw = float(dataset.scorer()(answer, entry))
        except Exception as exc:
            reason = f"reasoning-gym's scorer raised {type(exc).__name__} on this answer"
            if generated:  # the model's answer broke the parser: an honest 0
                return _result(0.0, components, info, reason)
            return _result(0.0, components, info, reason + " (ad-hoc task)", failure="invalid_reference")
        score = min(1.0, max(0.0, raw)) if raw == raw else 0.0  # NaN is no score
        contained = _uses_default_scorer(self.generator) or _contains(answer, str(entry.get("answer", "")))
        if self.strict_containment and 0.0 < score < 1.0 and contained:
            info["containment_score"] = score
            reason = "the answer only contains the reference among other text; scored 0 (strict)"
            return _result(0.0, components, info, reason)
        if self.strict_form and 0.0 < score < 1.0 and self.generator in FORM_STRICT_GENERATORS:
            info["partial_score"] = score
            reason = "reasoning-gym's partial credit for an answer not in the form asked; scored 0 (strict)"
            return _result(0.0, components, info, reason)
        components["correct"] = score
        verdict = "correct" if score >= 1.0 else "wrong" if score <= 0.0 else f"partly right ({score:.3g})"
        return _result(score, components, info, f"{answer[:60]!r} is {verdict}")


def _result(
    reward: float,
    components: dict[str, float],
    info: dict[str, Any],
    explanation: str,
    failure: str | None = None,
) -> VerifyResult:
    return VerifyResult(
        reward=reward,
        components=dict(components),
        info={**info, "explanation": explanation},
        failure=failure,
    )


def _reference(task: Task) -> object:
    answer = task.answer
    return answer.get("answer", "") if isinstance(answer, Mapping) else answer


def _contains(answer: str, reference: str) -> bool:
    """Whether the answer holds the reference among other text (whitespace-insensitive): a hedge."""
    answer, reference = " ".join(answer.split()), " ".join(reference.split())
    return bool(reference) and reference in answer and answer != reference


def _distinct(answers: list[str]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for answer in answers:
        seen.setdefault(" ".join(answer.split()), answer)
    return tuple(seen.values())


@cache
def _uses_default_scorer(generator: str) -> bool:
    dataset_cls, _ = _rg().DATASETS[generator]
    base = importlib.import_module("reasoning_gym.dataset").ProceduralDataset
    return bool(dataset_cls.score_answer is base.score_answer)


def make_environment(generator: str, *, level: int = 0) -> type[ReasoningGymEnv]:
    """The environment class of one audited generator; level 0 is named `reasoning_gym/<generator>`,
    others `reasoning_gym/<generator>-l<level>`.

    Raises:
        ValueError: a generator the audit does not offer, or a level outside its offered range.
    """
    verdict = audited().get(generator)
    if verdict is None or not verdict.get("passed"):
        why = f" ({verdict['reason']})" if verdict else ""
        raise ValueError(f"{generator!r} is not an audited generator{why}; audit.json lists them")
    if not 0 <= level <= max_level(generator):
        raise ValueError(f"level must be between 0 and {max_level(generator)} for {generator!r}")
    return environment_class(generator, level, description=str(verdict.get("description", "")))


def environment_class(
    generator: str, level: int, *, description: str, levels: int | None = None
) -> type[ReasoningGymEnv]:
    """Build the class without consulting the audit (the audit builds its candidates with it).

    `levels` caps the levels served by task id (None: the audit's `max_level`).
    """
    suffix = "" if level == 0 else f"-l{level}"
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": f"ReasoningGym_{generator}{suffix.replace('-', '_')}",
        "__doc__": f"reasoning-gym's {generator} generator at curriculum level {level}.",
        "name": f"reasoning_gym/{generator}{suffix}",
        "description": f"{description} (reasoning-gym, level {level}; answer in <answer> tags)",
        "generator": generator,
        "level": level,
        "top_level": levels,
    }
    return type(namespace["__qualname__"], (ReasoningGymEnv,), namespace)


def environments() -> list[type[ReasoningGymEnv]]:
    """The entry point: one class per audited generator at level 0 (read from `audit.json`).

    Raises:
        MissingExtra: reasoning-gym is not installed (the registry records it, to name the extra).
    """
    if not _installed():
        extra = EXTRA_OF_MODULE["reasoning_gym"]
        raise MissingExtra("reasoning_gym", extra, "the reasoning_gym/* family")
    return [_level_zero(generator) for generator in generators()]


def _installed() -> bool:
    return importlib.util.find_spec("reasoning_gym") is not None


@cache
def _level_zero(generator: str) -> type[ReasoningGymEnv]:
    """One class per generator per process, so repeated discovery registers the same classes."""
    return make_environment(generator)
