"""The reward curve of a training run, as a PNG people can read without the JSON beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["reward_curve_png"]


def reward_curve_png(
    path: Path,
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    held_out: Mapping[str, float | None] | None = None,
) -> None:
    """Plot per-step training curves (one line per `series` entry; None is a step without signal).

    `held_out` maps a label such as "before" or "after" to a held-out mean reward, drawn as dashed
    horizontal lines so the training curve can be read against what evaluation measured.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: never look for a display
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        for label, values in series.items():
            steps = [i + 1 for i, v in enumerate(values) if v is not None]
            axes.plot(steps, [v for v in values if v is not None], marker="o", markersize=3, label=label)
        for (label, value), style in zip((held_out or {}).items(), ("--", ":", "-."), strict=False):
            if value is not None:
                axes.axhline(value, color="grey", linestyle=style, label=f"held-out {label}: {value:.2f}")
        axes.set_xlabel("GRPO step")
        axes.set_ylabel("mean over the step's episodes")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
