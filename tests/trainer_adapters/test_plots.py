"""`reward_curve_png`: every held-out level is drawn, a run's own level in its training line's colour,
and the file is a PNG."""

from __future__ import annotations

from pathlib import Path

from gym_trainer.plots import reward_curve_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_every_held_out_level_is_drawn_and_a_runs_level_takes_its_colour(tmp_path: Path) -> None:
    path = tmp_path / "curve.png"
    series: dict[str, list[float | None]] = {
        "GRPO (curriculum)": [0.25, 0.5, None, 1.0],
        "GRPO (uniform)": [0.5, 0.25, 0.75, 0.75],
    }
    # Four levels, two of them equal: a fourth level used to be dropped (three dash styles, zipped).
    held_out: dict[str, float | None] = {
        "base": 0.0,
        "sft": 0.42,
        "grpo-curriculum": 0.92,
        "grpo-uniform": 0.92,
        "skipped": None,
    }
    entries = reward_curve_png(
        path,
        series,
        title="t",
        held_out=held_out,
        held_out_of={"grpo-curriculum": "GRPO (curriculum)", "grpo-uniform": "GRPO (uniform)"},
    )
    labels = [label for label, _ in entries]
    assert labels == [
        "GRPO (curriculum)",
        "GRPO (uniform)",
        "held-out base: 0.00",
        "held-out sft: 0.42",
        "held-out grpo-curriculum: 0.92",
        "held-out grpo-uniform: 0.92",
    ]
    colour = dict(entries)
    assert colour["held-out grpo-curriculum: 0.92"] == colour["GRPO (curriculum)"]
    assert colour["held-out grpo-uniform: 0.92"] == colour["GRPO (uniform)"]
    assert colour["GRPO (curriculum)"] != colour["GRPO (uniform)"]
    assert colour["held-out base: 0.00"] == colour["held-out sft: 0.42"] == "#808080"
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_more_levels_than_dash_styles_are_all_kept(tmp_path: Path) -> None:
    levels = {f"run-{i}": i / 10 for i in range(8)}
    entries = reward_curve_png(tmp_path / "c.png", {"train": [0.1, 0.2]}, title="t", held_out=levels)
    assert [label for label, _ in entries][1:] == [f"held-out run-{i}: {i / 10:.2f}" for i in range(8)]
