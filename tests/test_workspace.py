"""The workspace's layout (docs/decisions.md, "A workspace of five distributions"): the design's top-level
folders are distributions of their own, the built-in environments are shaped like `gym-server init`'s,
the old import paths still resolve, and the trainer side installs without the service.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import subprocess
import sys
import tomllib
import venv
import warnings
from pathlib import Path
from typing import Any

import pytest
from gymtest import ROOT
from image_requirements import MEMBERS
from image_requirements import requirements as image_requirements

from gym_server.core import moved

ENVIRONMENTS = sorted(path.parent for path in (ROOT / "environments").glob("*/pyproject.toml"))
WORKSPACE = (ROOT / "requirements" / "workspace.txt").read_text().splitlines()


def project(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_every_environment_folder_is_a_distribution() -> None:
    folders = sorted(path for path in (ROOT / "environments").iterdir() if path.is_dir())
    assert folders == ENVIRONMENTS, "a folder under environments/ without its pyproject.toml"
    assert len(ENVIRONMENTS) >= 17


@pytest.mark.parametrize("folder", ENVIRONMENTS, ids=lambda folder: folder.name)
def test_a_built_in_environment_is_shaped_like_a_scaffolded_one(folder: Path) -> None:
    name = folder.name
    package = folder / f"gym_env_{name}"
    meta = project(folder)
    assert meta["name"] == f"gym-env-{name.replace('_', '-')}"
    assert "gym-server==0.1.0" in meta["dependencies"]
    (point,) = meta["entry-points"]["gym_server.environments"].items()
    assert point[0] == name and point[1].startswith(f"gym_env_{name}.")
    assert (package / "__init__.py").is_file() and (package / "env.py").is_file()
    assert (folder / "README.md").is_file() and (folder / "tests").is_dir()
    assert not (package / "tests").exists(), "tests live beside the package, out of its wheel"
    assert f"-e ./environments/{name}" in WORKSPACE
    extra = project(ROOT)["optional-dependencies"]["environments"]
    assert f"{meta['name']}==0.1.0" in extra


@pytest.mark.parametrize("folder", ENVIRONMENTS, ids=lambda folder: folder.name)
def test_an_environment_needs_nothing_the_service_image_lacks(folder: Path) -> None:
    """The image's dependency layer reads only the service's and its members' pyproject files."""
    image = _closure({_name(text) for text in image_requirements(ROOT, ["sandbox"])})
    needed = {_name(text) for text in project(folder)["dependencies"]} - {"gym-server"}
    assert {name for name in needed if not name.startswith("gym-")} <= image


def _closure(names: set[str]) -> set[str]:
    """`names` and everything their installed distributions require (what the image's layer installs)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            requires = importlib.metadata.requires(name) or []
            todo += [_name(text) for text in requires if "extra ==" not in text]
    return seen


def _name(requirement: str) -> str:
    return requirement.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()


def test_the_image_copies_every_pyproject_its_dependency_layer_reads() -> None:
    dockerfile = (ROOT / "deploy" / "server.Dockerfile").read_text()
    layer = dockerfile[: dockerfile.index("COPY gym_server/")]  # before the sources: the dependency layer
    for folder in MEMBERS.values():
        assert f"COPY {folder}/pyproject.toml {folder}/" in layer, folder


def test_the_image_requirements_follow_the_members_and_leave_them_out() -> None:
    found = image_requirements(ROOT, ["trl"])
    names = {_name(text) for text in found}
    assert {"fastapi", "sqlalchemy", "math-verify", "httpx", "trl", "torch"} <= names
    assert not {name for name in names if name.startswith("gym-")}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("gym_server.trainer_adapters.client", "gym_trainer.client"),
        ("gym_server.verifiers.text", "gym_verifiers.text"),
        ("gym_server.datasets", "gym_datasets"),
        ("gym_server.environments.counter.env", "gym_env_counter.env"),
    ],
)
def test_an_old_import_path_is_the_new_module_with_a_deprecation_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"moved to {new.split('.')[0]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert moved.new_name(old) == new
    assert moved.new_name("gym_server.sessions") is None


def test_an_old_from_import_gives_the_same_class() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from gym_server.trainer_adapters.client import GymClient as Old  # type: ignore[import-not-found]
    from gym_trainer.client import GymClient

    assert Old is GymClient


@pytest.mark.slow
def test_the_trainer_side_installs_and_imports_without_the_service(tmp_path: Path) -> None:
    """A fresh venv gets `gym-trainer` (its base install) from the index and the checkout: the client and the
    driver import, and none of the service's stack comes along."""
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    lock = ROOT / "requirements" / "lock.txt"
    install = [python, "-m", "pip", "install", "-q", "-c", str(lock), str(ROOT / "trainer_adapters")]
    done = subprocess.run(install, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 and "No matching distribution" in done.stderr:
        pytest.skip(f"no package index reachable: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    probe = (
        "import importlib.util as u, gym_trainer.client, gym_trainer.driver, gym_trainer.samplers;"
        "print(*(m for m in ('gym_server', 'fastapi', 'sqlalchemy', 'alembic', 'gym_verifiers', 'torch')"
        " if u.find_spec(m)))"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    shown = subprocess.run([python, "-P", "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [], f"the trainer side pulled in {shown.stdout}"
