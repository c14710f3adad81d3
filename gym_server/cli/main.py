"""The `gym-server` command: each command group lives in its own module and is only wired here.

`main` is the console script. Around the typer app it keeps two promises to the person at the terminal:
a command that needs an optional extra that is not installed prints one line naming the extra and exits
2 (never a traceback), and third-party deprecation warnings (a library telling its callers' developers
about a future change) are not shown; warnings attributed to gym-server's own modules still are, and an
explicit `-W` or `PYTHONWARNINGS` is left in charge.
"""

from __future__ import annotations

import sys
import warnings

import typer

from gym_server.cli import (
    db,
    demo,
    envcheck,
    envs,
    export,
    keys,
    play,
    policy,
    rescore,
    rollouts,
    sandbox,
    scaffold,
    serve,
    verifiers,
)
from gym_server.core.extras import missing_extra

app = typer.Typer(
    name="gym-server",
    help="Sandboxed multi-turn tool environments and verifiers over HTTP, for RL of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command()(serve.serve)
app.add_typer(envs.app, name="envs")
app.add_typer(envcheck.app, name="env")
app.command()(envs.tasks)
app.command()(play.play)
app.command("init")(scaffold.init)
app.add_typer(db.app, name="db")
app.add_typer(keys.app, name="keys")
app.command()(export.export)
app.add_typer(verifiers.app, name="verifiers")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(policy.app, name="policy")
app.command("eval")(rollouts.evaluate)
app.command("rollout")(rollouts.rollout)
app.command()(demo.demo)
app.command()(rescore.reverify)
app.command()(rescore.audit)

# A warning's module is where it is attributed (the `stacklevel` frame): anything outside the workspace's
# packages (gym_server, gym_trainer, gym_verifiers, gym_datasets, gym_env_<name>).
THIRD_PARTY = r"(?!gym_(server|trainer|verifiers|datasets|env_\w+)(\.|$))"
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def quiet_third_party_deprecations() -> None:
    """Hide libraries' deprecation warnings from the user, unless `-W` or `PYTHONWARNINGS` say otherwise."""
    if sys.warnoptions:
        return
    for category in DEPRECATIONS:
        warnings.filterwarnings("ignore", category=category, module=THIRD_PARTY)


def main() -> None:
    """The `gym-server` console script."""
    quiet_third_party_deprecations()
    try:
        app()
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
