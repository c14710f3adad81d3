"""The `gym-server` console script as a user meets it: a base install without extras, and no libraries'
deprecation noise.

Each test runs the console script's own entry point (read from pyproject.toml's `[project.scripts]`,
called as pip's generated wrapper calls it) in a fresh Python subprocess. A base install is simulated,
which is the cheapest faithful way here (a fresh venv would need every base dependency downloaded): a
`sitecustomize.py` on the subprocess's path replaces the path finder by one that finds nothing for the
extras' top-level modules (docker, torch, pyarrow, reasoning_gym, ...), so `import docker` raises the
same `ModuleNotFoundError` and `importlib.util.find_spec` returns the same None as when the package is
not installed, while everything else imports from this environment.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from gymtest import PYPROJECT, ROOT, console_script
from image_requirements import requirements

from gym_server.cli.main import quiet_third_party_deprecations
from gym_server.core.extras import EXTRA_OF_MODULE

BLOCKER = """\
import sys
from importlib.machinery import PathFinder

BLOCKED = {blocked!r}


class WithoutExtras(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in BLOCKED:
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [WithoutExtras if finder is PathFinder else finder for finder in sys.meta_path]
"""


@pytest.fixture
def base_install(tmp_path: Path) -> Path:
    """A folder whose sitecustomize.py hides every extra's modules from the subprocess."""
    folder = tmp_path / "base-install"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(EXTRA_OF_MODULE)))
    return folder


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_extras_table_matches_pyproject() -> None:
    """Every module the CLI blames on an extra is a requirement of that extra, and every requirement of an
    extra is in the table (a module several extras bring, like torch, names one of them)."""
    import_name = {"mlflow_skinny": "mlflow"}  # distributions whose import name differs
    base = {_import_name(text) for text in requirements(ROOT, [])}  # the service's own, in every install
    declared: dict[str, set[str]] = {}
    for extra in PYPROJECT["project"]["optional-dependencies"]:
        if extra in ("dev", "environments"):  # the test stack; the built-ins (workspace distributions)
            continue
        for name in {_import_name(text) for text in requirements(ROOT, [extra])} - base:
            declared.setdefault(import_name.get(name, name), set()).add(extra)
    assert set(declared) == set(EXTRA_OF_MODULE)
    assert all(EXTRA_OF_MODULE[module] in extras for module, extras in declared.items())


def _import_name(requirement: str) -> str:
    return re.split(r"[\[=<>~!;]", requirement)[0].strip().replace("-", "_")


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["sandbox", "build-image"], "sandbox"),
        (["demo", "--model", "tiny"], "trl"),
        (["policy", "serve"], "trl"),
        (["export", "{tmp}/runs.parquet", "--database-url", "sqlite:///{tmp}/gym.db"], "parquet"),
        (["tasks", "reasoning_gym/leg_counting"], "reasoning-gym"),
        (["play", "reasoning_gym/gcd"], "reasoning-gym"),
    ],
)
def test_a_command_needing_a_missing_extra_says_which_in_one_line(
    args: list[str], extra: str, base_install: Path, tmp_path: Path
) -> None:
    result = console_script(
        *(arg.format(tmp=tmp_path) for arg in args), cwd=tmp_path, pythonpath=[base_install]
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and f"pip install 'gym-server[{extra}]'" in lines[0]
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_eval_and_rollout_need_no_trainer_extra(command: str, base_install: Path, tmp_path: Path) -> None:
    """They drive a remote policy over HTTP: without torch they run, and fail only on the dead URL."""
    url = f"http://127.0.0.1:{closed_port()}"
    args = (command, "counter", "--policy", url, "--gym", url)
    result = console_script(*args, cwd=tmp_path, pythonpath=[base_install])
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "cannot list the policy's models" in output and "Connection refused" in output
    assert "Traceback" not in output and "pip install" not in output


def test_third_party_deprecation_warnings_are_not_shown(tmp_path: Path) -> None:
    """A plugin whose library warns when imported (as transformers and torch do) stays quiet in the CLI.

    The plugin is registered the way an installed distribution is (a `.dist-info` with an entry point in
    `gym_server.environments`), so the warning fires while the command discovers environments.
    """
    (tmp_path / "noisy_library.py").write_text(
        "import warnings\n"
        "warnings.warn('noisy_library.old is deprecated', FutureWarning)\n"
        "warnings.warn('noisy_library.older is deprecated', DeprecationWarning)\n"
    )
    (tmp_path / "noisy_plugin.py").write_text(
        "import noisy_library\n\n\ndef environments():\n    return []\n"
    )
    dist_info = tmp_path / "noisy_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        "[gym_server.environments]\nnoisy = noisy_plugin:environments\n"
    )
    result = console_script("envs", "show", "counter", cwd=tmp_path, pythonpath=[tmp_path])
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    # the library does warn: the same import outside the CLI shows it
    shown = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import noisy_plugin"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "FutureWarning: noisy_library.old is deprecated" in shown.stderr


def test_gym_servers_own_warnings_still_show() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party_deprecations()
        for module in ("gym_trainer.generation", "transformers.modeling_utils", "gym_server"):
            warnings.warn_explicit("old", FutureWarning, f"{module}.py", 1, module=module)
    assert [str(w.filename) for w in caught] == [
        "gym_trainer.generation.py",
        "gym_server.py",
    ]
