"""The tracker backends behind `open_tracker`: trackio, Weights & Biases (offline), MLflow (file store).

Each is imported only when chosen (the service and a `--tracker none` run never import them). Every
backend gets the same calls: `log(metrics, step)` once per training step and `finish()` once; `step`
is the trainer's global step, so runs of different trainers line up on the same axis.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = ["BACKENDS", "Tracker", "TrackingUnavailable", "open_tracker"]

BACKENDS = ("trackio", "wandb", "mlflow", "none")


class TrackingUnavailable(RuntimeError):
    """The chosen backend's package is not installed."""


class Tracker(Protocol):
    """Where a training run's metrics go."""

    backend: str

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TrackingUnavailable(
            f"--tracker needs {name}: pip install 'gym-server[tracking]' (or choose --tracker none)"
        ) from exc


def _plain(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's configuration as JSON-able values (paths and other objects as their text)."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        out[key] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
    return out


class NullTracker:
    """`--tracker none`: nothing is recorded."""

    backend = "none"

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        del metrics, step

    def finish(self) -> None:
        pass


class TrackioTracker:
    """trackio's local store: `<directory>/<project>.db` (SQLite)."""

    backend = "trackio"

    def __init__(self, project: str, run: str | None, config: dict[str, Any], directory: Path | None) -> None:
        imported = "trackio" in sys.modules
        if directory is not None and not imported:
            os.environ["TRACKIO_DIR"] = str(directory)  # trackio fixes its folder when first imported
        trackio = _module("trackio")
        folder = Path(importlib.import_module("trackio.utils").TRACKIO_DIR)
        if directory is not None and folder.resolve() != directory.resolve():
            raise ValueError(
                f"trackio already writes to {folder} in this process (its folder is fixed when it is first "
                f"imported); set TRACKIO_DIR={directory} before starting, or leave the directory unset"
            )
        self.directory = folder
        # No CPU/GPU sampling threads: the metrics are the gym's, logged once per step.
        self._run = trackio.init(
            project=project, name=run, config=config, embed=False, auto_log_cpu=False, auto_log_gpu=False
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def finish(self) -> None:
        self._run.finish()


class WandbTracker:
    """Weights & Biases, offline unless `WANDB_MODE` says otherwise: `<directory>/wandb/offline-run-*`."""

    backend = "wandb"

    def __init__(self, project: str, run: str | None, config: dict[str, Any], directory: Path | None) -> None:
        wandb = _module("wandb")
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=project,
            name=run,
            config=config,
            dir=None if directory is None else str(directory),
            mode=os.environ.get("WANDB_MODE", "offline"),
            reinit="create_new",  # a second run in one process is its own run, not the first resumed
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def finish(self) -> None:
        self._run.finish()


class MlflowTracker:
    """An MLflow tracking store through `MlflowClient`: a `file:` store under `directory` (else
    `MLFLOW_TRACKING_URI`, else `./mlruns`).

    MLflow 3 keeps the file store in maintenance mode and refuses it unless `MLFLOW_ALLOW_FILE_STORE`
    is set; a file store needs no database server and no SQL migrations, which is what a local training
    run wants, so this backend sets that opt-in (unless the environment already decides) when its URI
    is a `file:` one. Point `MLFLOW_TRACKING_URI` at `sqlite:///...` or a server for the others.
    """

    backend = "mlflow"

    def __init__(self, project: str, run: str | None, config: dict[str, Any], directory: Path | None) -> None:
        uri = (
            (directory / "mlruns").resolve().as_uri()
            if directory is not None
            else os.environ.get("MLFLOW_TRACKING_URI", Path("mlruns").resolve().as_uri())
        )
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow = _module("mlflow")
        self._entities = importlib.import_module("mlflow.entities")
        self.uri = uri
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = (
            experiment.experiment_id if experiment is not None else self.client.create_experiment(project)
        )
        self.run_id: str = self.client.create_run(experiment_id, run_name=run).info.run_id
        params = [self._entities.Param(key, str(value)[:500]) for key, value in config.items()]
        if params:
            self.client.log_batch(self.run_id, params=params)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        batch = [self._entities.Metric(key, float(value), now, step) for key, value in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


_BACKENDS: dict[str, type[TrackioTracker | WandbTracker | MlflowTracker]] = {
    "trackio": TrackioTracker,
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
}


def open_tracker(
    backend: str = "trackio",
    *,
    project: str = "gym-server",
    run: str | None = None,
    config: Mapping[str, Any] | None = None,
    directory: Path | str | None = None,
) -> Tracker:
    """Start a run in the chosen backend.

    Args:
        backend: one of `BACKENDS`.
        project: trackio project, W&B project, MLflow experiment.
        run: the run's name (the gym `run` name is a good one: trajectories and metrics then match).
        config: hyperparameters recorded with the run.
        directory: the local store (see the package docstring); default: the backend's own.

    Raises:
        ValueError: an unknown backend.
        TrackingUnavailable: the backend's package is not installed.
    """
    if backend == "none":
        return NullTracker()
    if backend not in _BACKENDS:
        raise ValueError(f"unknown tracker {backend!r}; choose one of {', '.join(BACKENDS)}")
    where = None if directory is None else Path(directory)
    return _BACKENDS[backend](project, run, _plain(config), where)
