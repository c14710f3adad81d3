"""The tools folder: one host folder the operator fills, shown read-only inside every sandbox.

Some environments run a program the sandbox image does not carry: an MCP server from PyPI, a linter, a
database engine. Rather than bake each one into the image (Docker) or the host's /usr (bubblewrap), the
operator installs them into one host folder (`GYM_SANDBOX__TOOLS_DIR`, e.g. with
`pip install --target <dir>/<tool>` for the sandbox's python3) and every sandbox sees it at
`TOOLS_MOUNT`, read-only, so a sandboxed program can run the tools and cannot change them. The operator
chooses the folder, never a request or an environment manifest, so no episode can widen what sandboxes
see of the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

__all__ = ["TOOLS_MOUNT", "bwrap_options", "check_tools_dir", "docker_volumes"]

TOOLS_MOUNT: Final = "/opt/gym-tools"


def check_tools_dir(path: Path | None) -> Path | None:
    """The folder as an absolute, resolved path (None stays None).

    Sandboxes run as uids of their own, so the folder must be readable, and its parents passable, by
    every user; otherwise each sandbox would fail to start with a mount error naming no cause.

    Raises:
        ValueError: the path is not an existing folder, or other users cannot reach it.
    """
    if path is None:
        return None
    resolved = path.expanduser().resolve()
    if not resolved.is_dir():
        raise ValueError(f"the sandbox tools folder {str(path)!r} is not an existing folder")
    if resolved.stat().st_mode & 0o005 != 0o005:
        raise ValueError(f"the sandbox tools folder {str(resolved)!r} must be readable by all (chmod o+rx)")
    for parent in resolved.parents:
        if not parent.stat().st_mode & 0o001:
            raise ValueError(
                f"the sandbox tools folder {str(resolved)!r} is below {str(parent)!r}, which other users "
                "cannot pass (chmod o+x, or choose another folder)"
            )
    return resolved


def bwrap_options(tools_dir: Path | None) -> list[str]:
    """bubblewrap options binding the folder read-only at `TOOLS_MOUNT` (none without a folder)."""
    return [] if tools_dir is None else ["--ro-bind", str(tools_dir), TOOLS_MOUNT]


def docker_volumes(tools_dir: Path | None) -> dict[str, dict[str, Any]]:
    """The docker SDK's `volumes` option binding the folder read-only at `TOOLS_MOUNT`."""
    return {} if tools_dir is None else {str(tools_dir): {"bind": TOOLS_MOUNT, "mode": "ro"}}
