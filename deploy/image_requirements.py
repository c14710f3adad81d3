"""Print the third-party requirements of the service image, one a line: the service's dependencies and
those of the EXTRAS named, followed into the workspace's distributions it depends on (the trainer side, the
verifier library, the task files), and the build backend's. The workspace's own distributions (`gym-*`)
are built from the tree, so they are left out. The built-in environments add nothing beyond these
(tests/test_workspace.py checks it), so the image's dependency layer copies only the pyproject files of
the service and of these members (a test checks the Dockerfile does).

Usage (from the repository root or the image's build folder): python3 deploy/image_requirements.py [EXTRAS]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

# The distributions the service depends on, by name, and their folders.
MEMBERS = {"gym-trainer": "trainer_adapters", "gym-verifiers": "verifiers", "gym-datasets": "datasets"}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[([^\]]*)\])?")


def requirements(root: Path, extras: list[str]) -> list[str]:
    """The third-party requirements of the distribution in `root` with `extras`, members followed."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    wanted = list(project["project"].get("dependencies", []))
    for extra in extras:
        wanted += project["project"].get("optional-dependencies", {})[extra]
    found: list[str] = []
    for text in wanted:
        match = _NAME.match(text)
        name = match.group(1).lower().replace("_", "-") if match else ""
        if name in MEMBERS:
            inner = [e.strip() for e in (match.group(3) or "").split(",") if e.strip()] if match else []
            found += requirements(root / MEMBERS[name], inner)
        elif not name.startswith("gym-"):
            found.append(text)
    return found


def main() -> None:
    extras = [extra for extra in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if extra]
    root = Path.cwd()
    build = tomllib.loads((root / "pyproject.toml").read_text())["build-system"]["requires"]
    print("\n".join(sorted(set(requirements(root, extras))) + sorted(build)))


if __name__ == "__main__":
    main()
