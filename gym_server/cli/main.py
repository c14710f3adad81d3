"""The `gym-server` command: each command group lives in its own module and is only wired here."""

from __future__ import annotations

import typer

from gym_server.cli import (
    db,
    demo,
    envs,
    export,
    play,
    policy,
    rescore,
    rollouts,
    sandbox,
    scaffold,
    serve,
    verifiers,
)

app = typer.Typer(
    name="gym-server",
    help="Sandboxed multi-turn tool environments and verifiers over HTTP, for RL of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command()(serve.serve)
app.add_typer(envs.app, name="envs")
app.command()(envs.tasks)
app.command()(play.play)
app.command("init")(scaffold.init)
app.add_typer(db.app, name="db")
app.command()(export.export)
app.add_typer(verifiers.app, name="verifiers")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(policy.app, name="policy")
app.command("eval")(rollouts.evaluate)
app.command("rollout")(rollouts.rollout)
app.command()(demo.demo)
app.command()(rescore.reverify)
app.command()(rescore.audit)

if __name__ == "__main__":
    app()
