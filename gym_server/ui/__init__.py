"""The rollout inspector: server-rendered pages at `/ui` over the trajectory store and the live server.

`mount(app)` adds its routes and its static assets (templates, the page script, and uPlot vendored from
the npm registry with its licence), all served from the installed package: nothing loads from a CDN.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gym_server.ui.routes import router, templates

__all__ = ["mount"]

STATIC_DIR = Path(__file__).parent / "static"


def mount(app: FastAPI) -> None:
    """Serve the inspector's pages under `/ui` and its assets under `/ui/static`."""
    app.include_router(router)
    # Compiled now (once a process, Jinja caches them), not at each page's first request on the loop.
    for name in templates.env.list_templates():
        templates.env.get_template(name)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
