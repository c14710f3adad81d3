"""The trusted snapshot of a terminal episode's work dir. Runs *inside* the sandbox; never imported.

`state.py` sends this file's text as `python3 -I -S -c <source>` after the episode, with a JSON request
on stdin naming the files to read, the folders to list and the archives to open, and reads one JSON line
back. Nothing the agent ran is still alive (a sandbox keeps no process between commands), `-I -S` ignore
anything it left in the work dir, and symlinks are reported as links, never followed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
from typing import Any

MAX_TEXT = 65536
WORKDIR = "/work"


def describe(path: str) -> dict[str, Any]:
    try:
        info = os.lstat(path)
    except OSError:
        return {"type": "absent"}
    if stat.S_ISLNK(info.st_mode):
        return {"type": "link"}
    if stat.S_ISDIR(info.st_mode):
        return {"type": "dir"}
    if not stat.S_ISREG(info.st_mode):
        return {"type": "other"}
    if info.st_size > MAX_TEXT:
        return {"type": "file", "text": None, "size": info.st_size}
    with open(path, "rb") as handle:
        return {"type": "file", "text": handle.read().decode("utf-8", "replace"), "size": info.st_size}


def listing(path: str) -> list[str] | None:
    if describe(path)["type"] != "dir":
        return None
    return sorted(os.listdir(path))


def archive(path: str) -> dict[str, str | None] | None:
    if describe(path)["type"] != "file":
        return None
    try:
        with tarfile.open(path, "r:*") as tar:
            members: dict[str, str | None] = {}
            for member in tar.getmembers()[:1000]:
                name = os.path.normpath(member.name).lstrip("/")
                if member.isfile() and member.size <= MAX_TEXT:
                    data = tar.extractfile(member)
                    members[name] = data.read().decode("utf-8", "replace") if data else None
                elif not member.isdir():
                    members[name] = None
            return members
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return None


def main() -> None:
    request = json.loads(sys.stdin.read())
    state = {
        "files": {p: describe(os.path.join(WORKDIR, p)) for p in request["files"]},
        "dirs": {p: listing(os.path.join(WORKDIR, p)) for p in request["dirs"]},
        "archives": {p: archive(os.path.join(WORKDIR, p)) for p in request["archives"]},
    }
    sys.stdout.write(json.dumps(state) + "\n")


main()
