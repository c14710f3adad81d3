"""The manifest that registers a running NeMo Gym resources server as a gym environment.

A manifest is a JSON file, validated here so that a broken one fails at registration, naming the field,
never at the first episode. It names where the resources server listens (the operator starts it, in its
own environment: NeMo Gym pins a stack of its own) and the NeMo Gym dataset rows its episodes start
from. Relative dataset paths are relative to the manifest's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

__all__ = ["NemoGymManifest", "ResourcesServer", "load_manifest"]

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)]


class ResourcesServer(BaseModel):
    """Where the NeMo Gym resources server listens, and how long the gym waits for it.

    Attributes:
        url: its base URL (`http://127.0.0.1:8123`); `/seed_session`, `/verify` and `/<tool>` follow it.
        timeout_s: one request's deadline (seed, a tool call, verify); past it a tool call is answered
            with a timeout message and the episode goes on, a seed refuses the session (503).
    """

    model_config = ConfigDict(extra="forbid")

    url: AnyHttpUrl
    timeout_s: float = Field(30.0, gt=0, le=600)


class NemoGymManifest(BaseModel):
    """One NeMo Gym resources server as one gym environment, named `nemo_gym/<name>`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    description: Annotated[str, Field(min_length=1, max_length=500)]
    server: ResourcesServer
    splits: dict[Name, Path] = Field(
        min_length=1,
        description="split name -> a JSONL file of NeMo Gym rows ({responses_create_params, ...fields})",
    )
    max_turns: int = Field(16, ge=1, le=256)


def load_manifest(path: Path) -> NemoGymManifest:
    """Read and validate a manifest file; its split paths come back absolute.

    Raises:
        ValueError: the file is not JSON or does not validate (pydantic's error names the field).
    """
    manifest = NemoGymManifest.model_validate_json(path.read_text(encoding="utf-8"))
    folder = path.resolve().parent
    return manifest.model_copy(update={"splits": {k: folder / v for k, v in manifest.splits.items()}})
