"""`gym-server init NAME`: scaffold a pip-installable environment project that passes its own tests.

The project registers itself through the `gym_server.environments` entry point, so once installed the
server and the CLI find it like a built-in. Its example data and golden fixtures are generated here
so the fixtures always agree with the data, and its environment ships a `reference_solution()`, so
`gym-server env check NAME` plays a known solution from the start.

gym-server is not on the package index: the project depends on it by name, and its README and the
`next:` line say where this gym was installed from (a checkout or a wheel), which a fresh venv installs
first (docs/install.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import re
import shlex
from pathlib import Path
from string import Template
from typing import Annotated, Any
from urllib.parse import unquote, urlparse

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

console = Console()
TEMPLATES = Path(__file__).parent / "templates"
NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# The workspace's distributions the service depends on (pyproject.toml), each a folder of the checkout.
_SERVICE_MEMBERS = ("trainer_adapters", "verifiers", "datasets")
_NOTES = ("apples", "boxes", "chairs", "desks", "emails", "files", "guests", "hours")


def init(
    name: Annotated[str, typer.Argument(help="environment name: lowercase letters, digits and '_'")],
    directory: Annotated[Path, typer.Option("--dir", help="where to create the project folder")] = Path("."),
    force: Annotated[bool, typer.Option(help="write into an existing, non-empty folder")] = False,
) -> None:
    """Scaffold a new environment: class, dataset, golden fixtures, README and a passing test."""
    if not NAME.match(name):
        console.print(
            f"[red]error:[/] {name!r} is not a valid name: use lowercase letters, digits and '_' "
            "(starting with a letter, at most 48)"
        )
        raise typer.Exit(2)
    root = directory / name
    if root.exists() and any(root.iterdir()) and not force:
        console.print(f"[red]error:[/] {root} exists and is not empty (use --force to write into it)")
        raise typer.Exit(2)
    written = scaffold(name, root)
    tree = Tree(f"[bold]{root}[/]")
    for path in written:
        tree.add(str(path.relative_to(root)))
    console.print(tree)
    install = escape("pip install -e '.[test]'")  # the test extra: pytest and pytest-asyncio
    console.print(
        f"next: [bold]cd {root} && {install} && pytest[/], then [bold]gym-server env check {name}[/] "
        f"and [bold]gym-server play {name}[/]"
    )
    console.print(
        "gym-server is not on the package index: in a fresh venv, first "
        f"[bold]{escape(gym_install_command())}[/] (see {escape(str(root / 'README.md'))})"
    )


def gym_install_command() -> str:
    """How to install the gym this command runs from into another venv: from the checkout it is
    installed from (editable or not), from the wheel file it was installed from, else by name."""
    try:
        distribution = importlib.metadata.distribution("gym-server")
        direct = json.loads(distribution.read_text("direct_url.json") or "null")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        direct = None
    if direct and str(direct.get("url", "")).startswith("file://"):
        path = Path(unquote(urlparse(direct["url"]).path))
        if direct.get("dir_info", {}).get("editable"):
            return _editable_install(path)
        # a wheel: the workspace's other wheels (`make wheel`) lie beside it
        return f"pip install --find-links {shlex.quote(str(path.parent))} {shlex.quote(str(path))}"
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "gym_server").is_dir():
        return _editable_install(checkout)
    return "pip install gym-server"


def _editable_install(checkout: Path) -> str:
    """The service from a checkout with the distributions it depends on, which are not on the package
    index either (the built-in environments are not needed to write one)."""
    folders = [checkout / member for member in _SERVICE_MEMBERS] + [checkout]
    return "pip install " + " ".join(f"-e {shlex.quote(str(folder))}" for folder in folders)


def scaffold(name: str, root: Path) -> list[Path]:
    """Write the project and return the files written."""
    package = f"gym_env_{name}"
    values = {
        "name": name,
        "package": package,
        "cls": "".join(p.capitalize() for p in name.split("_")) + "Env",
        "gym_install": gym_install_command(),
    }
    files: dict[Path, str] = {
        root / "pyproject.toml": _fill("pyproject.toml.tmpl", values),
        root / "README.md": _fill("README.md.tmpl", values),
        root / package / "__init__.py": f'"""The {name} gym-server environment."""\n',
        root / package / "env.py": _fill("env.py.tmpl", values),
        root / "tests" / "test_env.py": _fill("test_env.py.tmpl", values),
    }
    tasks = _example_tasks(name, 24)
    files[root / package / "data" / "train.jsonl"] = _jsonl(tasks[:20])
    files[root / package / "data" / "validation.jsonl"] = _jsonl(tasks[20:])
    files[root / package / "fixtures" / "golden.jsonl"] = _jsonl(_golden(tasks[0]))
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(files)


def _fill(template: str, values: dict[str, str]) -> str:
    return Template((TEMPLATES / template).read_text()).substitute(values)


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(orjson.dumps(row).decode() + "\n" for row in rows)


def _example_tasks(name: str, count: int) -> list[dict[str, Any]]:
    rng = random.Random(name)
    tasks = []
    for index in range(count):
        notes = {key: str(rng.randint(2, 99)) for key in rng.sample(_NOTES, 3)}
        key = rng.choice(sorted(notes))
        tasks.append(
            {
                "id": f"{name}-{index:04d}",
                "prompt": f"How many {key} does the note '{key}' record?",
                "answer": {"value": notes[key], "key": key, "notes": notes},
            }
        )
    return tasks


def _golden(task: dict[str, Any]) -> list[dict[str, Any]]:
    key, value = task["answer"]["key"], task["answer"]["value"]
    lookup = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "lookup", "arguments": orjson.dumps({"key": key}).decode()},
            }
        ],
    }
    bad_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
        ],
    }
    return [
        {
            "name": "full",
            "task_id": task["id"],
            "seed": 0,
            "reward": 1.0,
            "assistant": [lookup, {"role": "assistant", "content": value}],
        },
        {
            "name": "zero",
            "task_id": task["id"],
            "seed": 0,
            "reward": 0.0,
            "assistant": [{"role": "assistant", "content": "I do not know."}],
        },
        {
            "name": "malformed",
            "task_id": task["id"],
            "seed": 0,
            "reward": 0.0,
            "assistant": [bad_call, {"role": "assistant", "content": "<answer>?</answer>"}],
        },
    ]
