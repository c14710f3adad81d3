"""`gym-server sandbox`: build the sandbox image offline and see which backends can run code here.

`build-image` makes the Docker image without a registry (debootstrap rootfs with python3, then `docker
import`); `--if-missing` makes it cheap to call from CI set-up scripts. `status` says, per backend,
whether it works and why not, and which one `auto` would pick; it exits 1 when none can run code, so a
deploy script can stop before the server starts answering 503.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gym_server.core.errors import SandboxUnavailable
from gym_server.core.extras import needs_extras
from gym_server.core.settings import Settings
from gym_server.sandbox.images import DEFAULT_MIRROR, DEFAULT_SUITE

__all__ = ["app"]

app = typer.Typer(help="Sandbox image and backends.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


@app.command("build-image")
def build_image(
    tag: Annotated[str | None, typer.Option(help="image name (default: GYM_SANDBOX__IMAGE)")] = None,
    mirror: Annotated[str, typer.Option(help="Debian mirror debootstrap downloads from")] = DEFAULT_MIRROR,
    suite: Annotated[str, typer.Option(help="Debian release")] = DEFAULT_SUITE,
    package: Annotated[
        list[str] | None, typer.Option("--package", "-p", help="extra Debian package (repeatable)")
    ] = None,
    keep_rootfs: Annotated[
        Path | None, typer.Option(help="also keep the rootfs here (for the bubblewrap backend's rootfs)")
    ] = None,
    if_missing: Annotated[
        bool, typer.Option("--if-missing", help="do nothing when the image exists")
    ] = False,
) -> None:
    """Build the sandbox image offline: debootstrap (root, about a minute), trim, docker import."""
    with needs_extras("gym-server sandbox build-image"):
        import docker

        from gym_server.sandbox import images

    image = tag or Settings().sandbox.image
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        errors.print(f"[red]The Docker engine does not answer:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    if if_missing and images.image_exists(client, image):
        console.print(f"Image [bold]{escape(image)}[/bold] already exists.")
        return
    packages = (*images.DEFAULT_PACKAGES, *(package or []))
    console.print(
        f"Building [bold]{escape(image)}[/bold] from {escape(mirror)} ({suite}) with {', '.join(packages)}"
    )
    try:
        image_id = images.build_image(
            client, image, suite=suite, mirror=mirror, packages=packages, keep_rootfs=keep_rootfs
        )
    except (RuntimeError, OSError) as exc:
        errors.print(f"[red]Building the image failed:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    console.print(f"Built [bold]{escape(image)}[/bold] ({image_id[:19]})")


async def _probe(settings: Settings) -> dict[str, Any]:
    from gym_server.sandbox.factory import make_backend

    report: dict[str, Any] = {
        "configured": settings.sandbox.backend,
        "image": settings.sandbox.image,
        "backends": {},
    }
    for kind in ("docker", "bubblewrap"):
        entry: dict[str, Any] = {"ok": False}
        try:
            backend = make_backend(kind, image=settings.sandbox.image, server_name="gym-status")
        except ImportError as exc:
            entry["detail"] = f"not installed: {exc}"
            report["backends"][kind] = entry
            continue
        try:
            await backend.check()
            box = await backend.start()
            try:
                result = await box.exec(["python3", "-c", "import sys; print(sys.version.split()[0])"])
            finally:
                await box.close()
            entry.update(
                ok=result.ok, python=result.text().strip(), exec_ms=round(result.duration_s * 1000, 1)
            )
            if not result.ok:
                entry["detail"] = result.text("stderr")[:300]
        except SandboxUnavailable as exc:
            entry["detail"] = exc.detail
        finally:
            await backend.aclose()
        report["backends"][kind] = entry
    usable = [kind for kind, entry in report["backends"].items() if entry["ok"]]
    report["auto"] = usable[0] if usable else None
    return report


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Which backends can run code here, and which one `auto` picks; exit 1 when none can."""
    settings = Settings()
    report = asyncio.run(_probe(settings))
    if as_json:
        console.print_json(json.dumps(report))
    else:
        table = Table("backend", "usable", "python", "exec ms", "detail")
        for kind, entry in report["backends"].items():
            table.add_row(
                kind,
                "yes" if entry["ok"] else "no",
                entry.get("python", ""),
                str(entry.get("exec_ms", "")),
                escape(str(entry.get("detail", ""))),
            )
        console.print(table)
        console.print(f"configured: {report['configured']}; auto picks: {report['auto'] or 'nothing'}")
    if report["auto"] is None and settings.sandbox.backend != "unsafe-no-sandbox":
        raise typer.Exit(1)


if __name__ == "__main__":  # `python -m gym_server.cli.sandbox`, for set-up scripts run before install
    app()
