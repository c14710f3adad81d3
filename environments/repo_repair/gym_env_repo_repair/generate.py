"""Generate the `repo_repair` tasks: a tiny Python package with one bug, a failing visible test, hidden tests.

A task picks three functions (`templates.py`), breaks one, and writes the package (`<pkg>/__init__.py`,
`<pkg>/<module>.py`), a `unittest` suite that fails on the bug (`tests/test_<module>.py`) and a README
into the task's public metadata (`files`). The hidden part (`answer`) holds the hidden tests (assert lines
over `solution.<function>(...)`, with inputs the visible tests do not use) and the fixed module, the
reference solution. Every expected value is computed by running the correct body; a draw is kept only
when the buggy body fails the visible test and at least one hidden case the visible test does not show.

    python -m gym_env_repo_repair.generate   #
    datasets/gym_datasets/repo_repair/{train,validation}.jsonl
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

from gym_env_repo_repair.templates import SIGNATURES, TEMPLATES, Template
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["SEED", "TASK_COUNT", "build_tasks", "write"]

SEED = 20_251_126
TASK_COUNT = 60
VALIDATION_EVERY = 5
PACKAGES = ["textkit", "numtools", "listops", "tinyutil", "strlab", "seqtools", "datakit", "minilib"]
MODULES = ["core", "helpers", "ops", "utils"]


def _function(template: Template, body: str) -> str:
    return f'def {template.name}({SIGNATURES[template.name]}):\n    """{template.doc}"""\n{body}'


def _module(templates: list[Template], buggy: str) -> tuple[str, str]:
    """The module's source with the bug and without it."""
    parts = {
        t.name: (_function(t, t.correct), _function(t, t.buggy if t.name == buggy else t.correct))
        for t in templates
    }
    header = '"""Small helpers, each with a docstring that says what it returns."""\n\n\n'
    fixed = header + "\n\n".join(correct for correct, _ in parts.values())
    broken = header + "\n\n".join(wrong for _, wrong in parts.values())
    return fixed, broken


def _call(source: str, name: str, args: tuple[Any, ...]) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<template>", "exec"), namespace)
    try:
        return namespace[name](*copy.deepcopy(args))
    except Exception as exc:  # a bug may crash; that is a failing case too
        return f"<{type(exc).__name__}>"


def _args(args: tuple[Any, ...]) -> str:
    return ", ".join(repr(value) for value in args)


def _draw(rng: random.Random, number: int) -> Task | None:
    templates = rng.sample(TEMPLATES, 3)
    bug = templates[0]
    rng.shuffle(templates)
    package, module = rng.choice(PACKAGES), rng.choice(MODULES)
    fixed, broken = _module(templates, bug.name)
    visible: list[str] = []
    hidden: list[str] = []
    for template in templates:
        cases = template.inputs(rng)
        expected = [_call(fixed, template.name, args) for args in cases]
        wrong = [
            _call(broken, template.name, args) != want for args, want in zip(cases, expected, strict=True)
        ]
        shown = wrong.index(True) if template is bug and any(wrong) else 0
        if template is bug and not any(w for index, w in enumerate(wrong) if index != shown):
            return None  # the bug must also show in a hidden case the visible test does not give away
        visible.append(
            f"    def test_{template.name}(self):\n"
            f"        self.assertEqual({template.name}({_args(cases[shown])}), {expected[shown]!r})\n"
        )
        hidden += [
            f"assert solution.{template.name}({_args(args)}) == {want!r}"
            for args, want in zip(cases, expected, strict=True)
        ]
    names = ", ".join(sorted(t.name for t in templates))
    tests = (
        f"import unittest\n\nfrom {package} import {names}\n\n\n"
        f"class Test{module.capitalize()}(unittest.TestCase):\n" + "\n".join(visible)
    )
    files = {
        "README.md": f"# {package}\n\nHelpers: {names}.\n\nRun the tests with `python3 -m unittest`.\n",
        f"{package}/__init__.py": f'"""{package}: small helpers."""\n\nfrom .{module} import {names}\n\n'
        f"__all__ = {sorted(t.name for t in templates)!r}\n",
        f"{package}/{module}.py": broken,
        "tests/__init__.py": "",
        f"tests/test_{module}.py": tests,
    }
    prompt = (
        f"The repository in /work is a small Python package, `{package}`. Its test suite fails "
        "(`python3 -m unittest` in the repository root). Find the bug in the package and fix it. Do not "
        "change the tests: your fix is checked by other, hidden tests of the same functions. Use the tools "
        "to list, read and edit files and to run the tests; call `submit` when you are done."
    )
    answer = {
        "package": package,
        "hidden_tests": hidden,
        "fix": {"path": f"{package}/{module}.py", "content": fixed},
    }
    return Task(
        id=f"repo_repair-{number:04d}",
        prompt=prompt,
        answer=answer,
        metadata={"bug": bug.name, "files": files},
    )


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    """Every task in id order (a draw whose bug hides from the hidden tests is redrawn)."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    while len(tasks) < count:
        task = _draw(rng, len(tasks))
        if task is not None:
            tasks.append(task)
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/repo_repair/` and return their sizes."""
    return write_dataset(root / "repo_repair", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
