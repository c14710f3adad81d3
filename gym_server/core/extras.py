"""Optional extras: which `pip install 'gym-server[...]'` brings a module that a command needs.

The base install serves environments and verifiers. The trainer stack (`[trl]`), the Docker sandbox SDK
(`[sandbox]`), Parquet export (`[parquet]`), the reasoning-gym family (`[reasoning-gym]`) and the MCP
facade (`[mcp]`) are extras, because each pulls a large or separately pinned stack. Code needing one
imports it where it is used; a `ModuleNotFoundError` for one of the modules below becomes `MissingExtra`,
whose message is the single line a user needs (what is missing and the pip command that installs it).
The CLI entry point prints that line instead of a traceback (`gym_server.cli.main.main`).

`EXTRA_OF_MODULE` mirrors `[project.optional-dependencies]` in pyproject.toml (a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRA_OF_MODULE", "MissingExtra", "install_command", "missing_extra", "needs_extras"]

# Top-level import name -> the extra whose requirements install it.
EXTRA_OF_MODULE: dict[str, str] = {
    "docker": "sandbox",
    "pyarrow": "parquet",
    "reasoning_gym": "reasoning-gym",
    "torch": "trl",
    "transformers": "trl",
    "trl": "trl",
    "peft": "trl",
    "accelerate": "trl",
    "datasets": "trl",
    "gguf": "trl",
    "matplotlib": "trl",
    "mcp": "mcp",
    "ray": "ray",
    "cachetools": "verl",
    "trackio": "tracking",
    "wandb": "tracking",
    "mlflow": "tracking",
    "openai": "agents",
}


def install_command(extra: str) -> str:
    """The pip command that installs `extra`, quoted for any shell."""
    return f"pip install 'gym-server[{extra}]'"


class MissingExtra(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra that installs it."""

    def __init__(self, module: str, extra: str, purpose: str | None = None) -> None:
        what = f"{purpose} needs {module}, which is" if purpose else f"{module} is"
        super().__init__(f"{what} not installed: {install_command(extra)}", name=module)
        self.module = module
        self.extra = extra


def missing_extra(exc: ModuleNotFoundError, purpose: str | None = None) -> MissingExtra | None:
    """`exc` as a `MissingExtra` when the missing module comes with an extra, else None."""
    if isinstance(exc, MissingExtra):
        return exc
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return None if extra is None else MissingExtra(module, extra, purpose)


@contextmanager
def needs_extras(purpose: str) -> Iterator[None]:
    """Imports in this block that fail for want of an extra raise `MissingExtra` naming `purpose`.

    Example: `with needs_extras("gym-server demo"): import torch` raises "gym-server demo needs torch,
    which is not installed: pip install 'gym-server[trl]'" on a base install.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        found = missing_extra(exc, purpose)
        if found is None or found is exc:  # not an extra's module (the original says more), or done already
            raise
        raise found from exc
