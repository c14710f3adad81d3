"""Experiment tracking for every training entry point: one option picks the backend, the metrics are
the same everywhere.

Backends (`BACKENDS`), each writing to a local store so that runs work without a network:

- `trackio` (default): Hugging Face's local-first tracker; a SQLite file per project under `directory`
  (else `TRACKIO_DIR`, else `~/.cache/huggingface/trackio`). `trackio show` opens the dashboard.
- `wandb`: Weights & Biases in offline mode (`WANDB_MODE=offline` unless the environment sets another
  mode); runs land in `directory/wandb/offline-run-*` and `wandb sync` uploads them later.
- `mlflow`: an MLflow file store (`file:` URI of `directory/mlruns`, else `MLFLOW_TRACKING_URI`, else
  `./mlruns`), written through `mlflow.MlflowClient` (no global active run).
- `none`: nothing is written.

The packages come with the `tracking` extra (`pip install 'gym-server[tracking]'`); a missing one is
a `TrackingUnavailable` error naming what to install.

Use:

    tracker = open_tracker("trackio", project="my-project", run="grpo-1", config={"lr": 1e-3})
    rollout = GymRolloutFunc(gym_url, tracker=tracker)  # TRL: logs every step's episodes
    ...  # or, in any trainer's loop: tracker.log(rollout_metrics(rollouts), step)
    tracker.finish()

`rollout_metrics` computes the shared metric names (`gym/reward_mean`, `gym/reward_std`,
`gym/success_rate`, `gym/invalid_tool_call_rate`, `gym/failures/<class>`, `gym/episode_turns_mean`,
`gym/episode_tokens_mean`, `gym/env_latency_ms_per_step`, ...); see `tracking.metrics`. Scripts add
the command-line options with `add_tracking_arguments(parser)` and open the tracker with
`tracker_from_args(args, config=...)`. See `docs/tracking.md`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gym_trainer.tracking.backends import (
    BACKENDS,
    Tracker,
    TrackingUnavailable,
    open_tracker,
)
from gym_trainer.tracking.metrics import PREFIX, rollout_metrics

__all__ = [
    "BACKENDS",
    "PREFIX",
    "Tracker",
    "TrackingUnavailable",
    "add_tracking_arguments",
    "open_tracker",
    "rollout_metrics",
    "tracker_from_args",
]


def add_tracking_arguments(parser: argparse.ArgumentParser, default_project: str = "gym-server") -> None:
    """`--tracker`, `--tracking-project` and `--tracking-dir`, for an example script's parser."""
    parser.add_argument("--tracker", choices=BACKENDS, default="trackio", help="experiment tracking backend")
    parser.add_argument("--tracking-project", default=default_project)
    parser.add_argument(
        "--tracking-dir", type=Path, default=None, help="local store (default: the backend's own)"
    )


def tracker_from_args(
    args: argparse.Namespace, run: str | None = None, config: Mapping[str, Any] | None = None
) -> Tracker:
    """The tracker the options of `add_tracking_arguments` name."""
    return open_tracker(
        args.tracker, project=args.tracking_project, run=run, config=config, directory=args.tracking_dir
    )
