"""The reward curve of a training run, as a PNG people can read without the JSON beside it."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["reward_curve_png"]


def reward_curve_png(
    path: Path,
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    held_out: Mapping[str, float | None] | None = None,
    held_out_of: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """Plot per-step training curves (one line per `series` entry; None is a step without signal).

    `held_out` maps a label such as "before", "sft" or a run's name to a held-out mean reward, drawn as a
    horizontal line so the training curve can be read against what evaluation measured: every level, each
    in a dash pattern of its own, grey, or in the colour of the training line `held_out_of` names for it
    (a run's evaluation beside the run's curve; two levels of one value then stay told apart).

    Returns:
        The legend's entries in order, each (label, colour as #rrggbb).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: never look for a display
    from matplotlib import pyplot as plt
    from matplotlib.colors import to_hex
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        colours: dict[str, str] = {}
        for label, values in series.items():
            steps = [i + 1 for i, v in enumerate(values) if v is not None]
            points = [v for v in values if v is not None]
            (line,) = axes.plot(steps, points, marker="o", markersize=3, label=label)
            colours[label] = to_hex(line.get_color())
        entries = list(colours.items())
        levels = [(label, value) for label, value in (held_out or {}).items() if value is not None]
        for (label, value), style in zip(levels, itertools.cycle(_DASHES), strict=False):
            colour = colours.get((held_out_of or {}).get(label, ""), _GREY)
            entries.append((f"held-out {label}: {value:.2f}", colour))
            axes.axhline(value, color=colour, linestyle=style, label=entries[-1][0])
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 1.2, 1.4 on 2 steps
        axes.set_xlabel("GRPO step")
        axes.set_ylabel("mean over the step's episodes")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
        figure.tight_layout()
        figure.savefig(path, format="png")
        return entries
    finally:
        plt.close(figure)


_GREY = "#808080"
# Dash patterns for the held-out levels, cycled: a level is never left out for want of a style.
_DASHES: tuple[str | tuple[int, tuple[int, ...]], ...] = (
    "--",
    ":",
    "-.",
    (0, (5, 2, 1, 2, 1, 2)),
    (0, (8, 3)),
)
