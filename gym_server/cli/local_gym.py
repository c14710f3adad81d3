"""A throwaway gym for commands that need one: `gym-server serve` in a child process on a free loopback
port, for as long as a `with` block runs.

The demos and `policy serve --model tiny-counter` (whose warm-up reads counter start values through a
gym) use it when no `--gym` is given: a child process, not an in-process app, so the gym's event loop,
store writers and environment workers are the real server's and stop with it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import typer
from rich.console import Console

__all__ = ["local_gym"]

console = Console(stderr=True)


@contextlib.contextmanager
def local_gym(url: str | None, store: Path) -> Iterator[str]:
    """The given gym, or a fresh `gym-server serve` on a free port with its SQLite store at `store`
    (kept afterwards: the inspector and `reverify` read a demo's episodes from it).

    Raises:
        typer.Exit: the server exited, or was not ready within 60 s (status 1, after one line saying so).
    """
    if url:
        yield url
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="gym-local-") as tmp:
        env = {
            **os.environ,
            "GYM_DATABASE_URL": f"sqlite:///{store.resolve()}",
            "GYM_HOME": tmp,
            "GYM_LOG_LEVEL": "warning",
            "GYM_SERVER_NAME": "demo",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "gym_server.cli.main", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    why = "exited" if process.poll() is not None else "was not ready within 60 s"
                    console.print(f"[red]error:[/] the local gym server ({url}) {why}")
                    raise typer.Exit(1)
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
