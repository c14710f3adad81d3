"""The built-in environments' task files: `<name>/<split>.jsonl`, one task object a line.

Data only: a distribution of its own so that the files have one home that the service (its SDK reads a
dataset by name, `gym_server.sdk.tasks.DATASETS_ROOT`), the environments that generate them
(`environments/*/gym_env_*/generate.py`) and a wheel agree on.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT"]

ROOT = Path(__file__).resolve().parent
