"""What a terminal task asks of the final work dir, and how a snapshot of it is scored.

Checks are data (`answer.checks`), so inline tasks bring their own: a file with exact content (compared
after trailing whitespace is stripped from every line and from the end), a path that must not exist, a
folder whose entries must be exactly a set of names, a tar archive whose regular members must be exactly
a set of files with given contents. `snapshot_request()` says what the trusted snapshot must read;
`score_state()` scores what it read. Neither the agent's messages nor its exit codes play any part.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = ["ArchiveCheck", "Check", "TerminalAnswer", "score_state", "snapshot_request", "tidy"]


def _relative(path: str) -> str:
    if path.startswith("/") or ".." in path.split("/") or "\x00" in path:
        raise ValueError("must be a path relative to /work, without '..'")
    return path


RelPath = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_relative)]


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: RelPath


class FileCheck(_Check):
    kind: Literal["file"] = "file"
    content: str


class AbsentCheck(_Check):
    kind: Literal["absent"] = "absent"


class ListingCheck(_Check):
    kind: Literal["listing"] = "listing"
    names: list[str]


class ArchiveCheck(_Check):
    kind: Literal["archive"] = "archive"
    members: dict[str, str]


Check = Annotated[FileCheck | AbsentCheck | ListingCheck | ArchiveCheck, Field(discriminator="kind")]


class TerminalAnswer(BaseModel):
    """A task's hidden part: the checks, and a shell command that passes them (the reference solution)."""

    model_config = ConfigDict(extra="forbid")

    checks: Annotated[list[Check], Field(min_length=1)]
    solution: str = ""


def tidy(text: str) -> str:
    """Text as compared: trailing whitespace gone from every line and from the end."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).rstrip()


def snapshot_request(checks: list[Check]) -> dict[str, list[str]]:
    """The paths the trusted snapshot must read, list or open for these checks."""
    request: dict[str, list[str]] = {"files": [], "dirs": [], "archives": []}
    for check in checks:
        slot = {"file": "files", "absent": "files", "listing": "dirs", "archive": "archives"}[check.kind]
        request[slot].append(check.path)
    return request


def _passes(check: Check, state: dict[str, Any]) -> bool:
    if isinstance(check, FileCheck):
        found = state["files"].get(check.path) or {}
        return found.get("type") == "file" and tidy(found.get("text") or "\x00") == tidy(check.content)
    if isinstance(check, AbsentCheck):
        return (state["files"].get(check.path) or {}).get("type") == "absent"
    if isinstance(check, ListingCheck):
        return bool(state["dirs"].get(check.path) == sorted(check.names))
    members = state["archives"].get(check.path)
    if not isinstance(members, dict) or set(members) != set(check.members):
        return False
    return all(tidy(members[name] or "\x00") == tidy(text) for name, text in check.members.items())


def score_state(checks: list[Check], state: dict[str, Any]) -> list[bool]:
    """One verdict per check, in order, from the snapshot's JSON."""
    return [_passes(check, state) for check in checks]
