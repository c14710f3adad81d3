"""Exit 0 when the checkout in the current directory is already installed, editable, from this very folder,
(the service and each distribution requirements/workspace.txt names, with the entry points and dependencies
their pyproject.toml files declare), with every requirement of the named extras satisfied at the lock's
pins: then `pip install -r requirements/workspace.txt -e .[extras]` would change nothing and CI skips it
(a resolve costs 20-40 s on the 2-core machine, several times a run).
Exit 1, with the reason on stderr, when anything differs, so the caller installs.

Usage: python .ci/installed.py [EXTRAS] [LOCK]      EXTRAS: comma-separated (default none),
                                                    LOCK: requirements/lock.txt (default)
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections import deque
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ModuleNotFoundError:  # a bare venv (pip vendors its own copy): nothing of the project is installed yet
    print("packaging is not installed: nothing of the project is either", file=sys.stderr)
    raise SystemExit(1) from None


def lock_pins(lock: Path) -> dict[str, str]:
    """`name==version` lines of a pip-compile lock, by canonical name."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if found:
            pins[canonicalize_name(found.group(1))] = found.group(2)
    return pins


def members(root: Path) -> list[Path]:
    """The workspace's other distributions (`-e ./<folder>` lines of requirements/workspace.txt)."""
    listing = root / "requirements" / "workspace.txt"
    lines = listing.read_text().splitlines() if listing.exists() else []
    return [root / line[2:].strip() for line in lines if line.startswith("-e ")]


def member_problem(root: Path) -> str | None:
    """Why the distribution in `root` is not installed, editable from there, as its pyproject.toml says."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    try:
        dist = metadata.distribution(project["name"])
    except metadata.PackageNotFoundError:
        return f"{project['name']} is not installed"
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    if not origin.get("dir_info", {}).get("editable") or origin.get("url") != root.as_uri():
        return f"{project['name']} is installed from {origin.get('url', 'an index')}, not {root.as_uri()}"
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    declared = {(group, name, value) for group, points in groups.items() for name, value in points.items()}
    if {(ep.group, ep.name, ep.value) for ep in dist.entry_points} != declared:
        return f"{project['name']}'s entry points differ from its pyproject.toml's"
    installed = {str(Requirement(text)) for text in dist.requires or [] if "extra ==" not in text}
    if installed != {str(Requirement(text)) for text in project.get("dependencies", [])}:
        return f"{project['name']}'s dependencies differ from its pyproject.toml's"
    return None


def problem(root: Path, extras: list[str], pins: dict[str, str]) -> str | None:
    """Why `pip install -r requirements/workspace.txt -e root[extras]` would change something, or None."""
    for folder in [root, *members(root)]:
        why = member_problem(folder)
        if why:
            return why
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        return f"no such extra: {', '.join(unknown)}"
    # Every requirement reachable from the project's own (and its extras'), each at the lock's pin.
    queue = deque(Requirement(text) for text in project.get("dependencies", []))
    queue.extend(Requirement(text) for extra in extras for text in optional[extra])
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        req = queue.popleft()
        name = canonicalize_name(req.name)
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        try:
            installed = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            return f"{req} is not installed"
        version = installed.version
        if not req.specifier.contains(version, prereleases=True):
            return f"{req.name} {version} does not satisfy {req}"
        if name in pins and pins[name] != version:
            return f"{req.name} {version} is installed, the lock pins {pins[name]}"
        for text in installed.requires or []:
            sub = Requirement(text)
            wanted = ["", *sorted(req.extras)]
            if sub.marker is None or any(sub.marker.evaluate({"extra": extra}) for extra in wanted):
                queue.append(sub)
    return None


def main() -> int:
    extras = [extra for extra in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if extra]
    lock = Path(sys.argv[2] if len(sys.argv) > 2 else "requirements/lock.txt")
    why = problem(Path.cwd().resolve(), extras, lock_pins(lock) if lock.exists() else {})
    if why is None:
        return 0
    print(f"installed.py: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
