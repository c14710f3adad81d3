"""`--device` and `--dtype`, the same two options on every command that runs a model.

The rules are `trainer_adapters.devices.resolve`'s; this module only turns its refusals into what a
command line owes its user: a malformed value is a usage error, and a device that is not here
(`--device cuda` on a host without CUDA) is one line naming what is missing, with exit status 2, before
any model or gym starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from gym_trainer.devices import DEVICE_HELP, DTYPE_HELP, DeviceUnavailable, resolve

if TYPE_CHECKING:
    from gym_trainer.devices import Placement

__all__ = ["DeviceOption", "DtypeOption", "placement_or_exit"]

DeviceOption = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]
DtypeOption = Annotated[str, typer.Option("--dtype", help=DTYPE_HELP)]


def placement_or_exit(device: str, dtype: str, console: Console) -> Placement:
    """The resolved placement, made current; or the one-line refusal and exit 2 (a usage error for a
    malformed value). Needs torch: call it inside the command's `needs_extras` block or after it."""
    try:
        placement = resolve(device, dtype)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except DeviceUnavailable as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, never wrapped
        raise typer.Exit(2) from exc
    placement.activate()
    return placement
