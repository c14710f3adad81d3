"""compose.yaml's `gpu` profile, validated by a real compose CLI and checked against the code it runs.

The compose CLI validates the file against the Compose specification's schema (`docker compose` v2
when the plugin is installed, else Debian's `docker-compose` 1.29, which `.ci/stack-test.sh` installs
before the suite runs in CI). Then the merged configuration is read back and checked both ways against
`examples/train_grpo_trl.py`: every variable the trainer service sets is one the example reads (or
HF_TOKEN, which huggingface_hub reads), every variable the example reads is set, and they land in the
options the GPU configuration uses; vLLM runs in the mode TRL 1.16's weight sync needs. No GPU runs here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The vLLM versions TRL 1.16 supports (trl.import_utils.is_vllm_available): the server's and the trainer's.
VLLM_MIN, VLLM_MAX = (0, 22, 0), (0, 31, 0)
# huggingface_hub reads HF_TOKEN and the gym client reads GYM_API_KEY; the example does not need to
READ_BY_LIBRARIES = {"HF_TOKEN", "GYM_API_KEY"}


def compose_cli() -> list[str]:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    message = "no compose CLI (docker compose plugin or docker-compose; apt-get install docker-compose)"
    if os.environ.get("CI"):
        pytest.fail(message)  # CI installs it (.ci/stack-test.sh): its absence there is a broken setup
    pytest.skip(message)


def compose_config(cli: list[str], *files: Path) -> subprocess.CompletedProcess[str]:
    # The variables compose.yaml interpolates are left unset, so the file's own defaults are what is checked.
    interpolated = set(re.findall(r"\$\{(\w+)", (ROOT / "compose.yaml").read_text()))
    env = {k: v for k, v in os.environ.items() if k not in interpolated}
    sources = [arg for f in files for arg in ("-f", str(f))]
    return subprocess.run(
        [*cli, *sources, "--profile", "gpu", "config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.fixture(scope="module")
def cli() -> list[str]:
    return compose_cli()


@pytest.fixture(scope="module")
def services(cli: list[str]) -> dict[str, Any]:
    done = compose_config(cli, ROOT / "compose.yaml")
    assert done.returncode == 0, done.stderr
    merged: dict[str, Any] = yaml.safe_load(done.stdout)
    services: dict[str, Any] = merged["services"]
    return services


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_grpo_trl", ROOT / "examples" / "train_grpo_trl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_dict(environment: Any) -> dict[str, str]:
    if isinstance(environment, list):  # compose v1 may print KEY=VALUE lists
        return dict(item.split("=", 1) for item in environment)
    return {k: "" if v is None else str(v) for k, v in (environment or {}).items()}


def vllm_version(image: str) -> tuple[int, ...]:
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image)
    assert found, f"the vLLM image {image!r} names no version"
    return tuple(int(x) for x in found.groups())


def test_the_validator_is_real(cli: list[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("services:\n  vllm:\n    profiles: [gpu]\n    image: x\n    enable_lora: true\n")
    done = compose_config(cli, ROOT / "compose.yaml", broken)
    assert done.returncode != 0 and "enable_lora" in done.stderr + done.stdout


def test_vllm_runs_in_trls_weight_sync_mode(services: dict[str, Any]) -> None:
    vllm = services["vllm"]
    command = vllm["command"]
    options = dict(arg.removeprefix("--").split("=", 1) for arg in command if "=" in arg)
    assert yaml.safe_load(options["weight-transfer-config"]) == {"backend": "nccl"}
    assert options["logprobs-mode"] == "processed_logprobs"
    assert options["max-logprobs"] == "-1"
    assert not [arg for arg in command if "lora" in arg.lower()]  # TRL pushes merged weights, not adapters
    environment = as_dict(vllm["environment"])
    assert environment["VLLM_SERVER_DEV_MODE"] == "1"
    assert not [k for k in environment if "LORA" in k]
    assert VLLM_MIN <= vllm_version(vllm["image"]) <= VLLM_MAX
    # The trainer's side of the weight transfer is vLLM code too: the same vLLM as the server.
    assert services["trainer"]["build"]["args"]["TRAINER_BASE_IMAGE"] == vllm["image"]
    # NCCL refuses two ranks on one GPU.
    devices = [services[s]["deploy"]["resources"]["reservations"]["devices"][0] for s in ("vllm", "trainer")]
    assert devices[0]["device_ids"] != devices[1]["device_ids"]


def test_trainer_environment_matches_the_example(
    services: dict[str, Any], example: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = services["trainer"]
    environment = as_dict(trainer["environment"])
    assert set(environment) == set(example.ENVIRONMENT) | READ_BY_LIBRARIES
    assert trainer["command"] == ["python3", "examples/train_grpo_trl.py", "--config", "gpu"]
    for name in list(os.environ):
        if name in example.ENVIRONMENT:
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    args = example.parse_args(trainer["command"][2:])
    assert args.config == "gpu"
    for name, dest in example.ENVIRONMENT.items():
        assert str(getattr(args, dest)) == environment[name], name
    # The URLs name the services and the ports they listen on.
    assert args.gym_url == f"http://gym-server:{as_dict(services['gym-server']['environment'])['GYM_PORT']}"
    assert args.vllm_url == "http://vllm:8000" and "--port=8000" in services["vllm"]["command"]
    assert args.model == services["vllm"]["command"][0].split("=", 1)[1]  # the model vLLM serves
    targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in trainer["volumes"]]
    assert args.output in targets  # the output directory is the mounted one
