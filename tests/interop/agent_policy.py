"""The agent peers' warmed tiny policy, built once per content of its inputs and shared by every peer that
needs a policy able to call tools (art, langgraph, openai-agents, openrlhf, typescript).

    python tests/interop/agent_policy.py [GYM_URL]    # prints the model's folder, built first if absent

Run by the project's python (it needs the gym's `trl` extra). The folder lives in the peers' cache
(`$GYM_CI_CACHE/interop`, default ~/.cache/gym-server/interop), keyed by a hash of the warm-up script,
the recipe it runs and its arguments, so every later run and every fresh clone on the machine reuses it.
`run.sh` builds it before any peer starts: a build is minutes of CPU on 2 cores, and each peer building
its own, two at a time beside the stack test and under the peers' pytest timeouts, ran past them on a
loaded machine (CI, 2026-12-07: the ART warm-up killed at 900 s, the peers beside it failing). Callers
that arrive together (peers run alone, outside run.sh) take a lock on the cache: one builds, the others
wait and read its result. The build plays against GYM_URL when given (GYM_API_KEY, if set, is its key),
else against a throwaway gym of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WARM = HERE / "art" / "warm_policy.py"
# What the warmed weights depend on: the warm-up script and the recipe it runs.
WARM_INPUTS = (
    WARM,
    ROOT / "trainer_adapters/gym_trainer/warmup.py",
    ROOT / "trainer_adapters/gym_trainer/models.py",
)
# warm_policy.py's arguments after the gym and folder. Steps: at the recipe's 100, most calls sampled at
# temperature 1 were malformed (seen 2026-11-28 on a fresh machine: no tool call in 4 counter episodes);
# at 300, 8 of 8 well-formed. Workplace: the second environment the peers play, where a counter-only
# model never called a listed tool; warmed to call its `submit` (with counter's episodes three quarters
# of that phase's examples: at half, a fresh machine's warm-up made counter's first call a malformed
# `submit` in 4 of 4 episodes, 2026-11-28).
WARM_ARGS = ("300", "workplace")


def cached_folder() -> Path:
    """Where the policy for the current inputs is (or will be) kept."""
    sources = b"".join(path.read_bytes() for path in WARM_INPUTS)
    key = hashlib.sha256(sources + " ".join(WARM_ARGS).encode()).hexdigest()[:16]
    base = Path(os.environ.get("GYM_CI_CACHE") or Path.home() / ".cache" / "gym-server")
    return base / "interop" / f"agents-warm-policy-{key}"


def ensure(gym_url: str | None) -> Path:
    """The cached policy's folder, built first (under the cache's lock) when absent."""
    folder = cached_folder()
    if (folder / "tasks.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / "agents-warm-policy.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not (folder / "tasks.json").is_file():  # another caller may have built it while this one waited
            _build(folder, gym_url)
    return folder


def _build(folder: Path, gym_url: str | None) -> None:
    started = time.monotonic()
    print(f"warming the agent peers' tiny policy up ({' '.join(WARM_ARGS)}) into {folder}", file=sys.stderr)
    building = tempfile.mkdtemp(dir=folder.parent, prefix=f"{folder.name}.building-")
    try:
        with _gym(gym_url) as url:
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            command = [sys.executable, str(WARM), url, building, *WARM_ARGS]
            subprocess.run(command, env=env, stdout=sys.stderr, check=True)  # stdout: only the folder
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(building, folder)  # whole or absent: a reader never sees half a model
    finally:
        shutil.rmtree(building, ignore_errors=True)  # what a failed build left
    print(f"warmed in {time.monotonic() - started:.0f} s", file=sys.stderr)


@contextlib.contextmanager
def _gym(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from gym_server.cli.local_gym import local_gym

    with (
        tempfile.TemporaryDirectory(prefix="gym-agent-policy-") as tmp,
        local_gym(None, Path(tmp) / "gym.db") as gym,
    ):
        yield gym


if __name__ == "__main__":
    print(ensure(sys.argv[1] if len(sys.argv) > 1 else None))
