"""A dependency-free PNG line chart, for the demo's reward curve (matplotlib is not a dependency)."""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["line_chart_png"]

_BLUE = (31, 119, 180)
_GREY = (200, 200, 200)
_BLACK = (40, 40, 40)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def line_chart_png(
    path: Path,
    values: Sequence[float],
    *,
    low: float | None = None,
    high: float | None = None,
    width: int = 640,
    height: int = 360,
) -> None:
    """Plot `values` (one per step) as a polyline with axes and quarter grid lines; y from low to high."""
    margin = 32
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    lo = min(values) if low is None else low
    hi = max(values) if high is None else high
    span = (hi - lo) or 1.0

    def put(x: int, y: int, colour: tuple[int, int, int]) -> None:
        if 0 <= x < width and 0 <= y < height:
            pixels[y][x] = colour

    def to_xy(i: int, v: float) -> tuple[int, int]:
        x = margin + round(i * (width - 2 * margin) / max(1, len(values) - 1))
        y = height - margin - round((v - lo) * (height - 2 * margin) / span)
        return x, y

    for q in range(5):
        y = height - margin - round(q * (height - 2 * margin) / 4)
        for x in range(margin, width - margin):
            put(x, y, _GREY if q else _BLACK)
    for y in range(margin, height - margin + 1):
        put(margin, y, _BLACK)
    points = [to_xy(i, v) for i, v in enumerate(values)]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            x, y = x0 + (x1 - x0) * s // steps, y0 + (y1 - y0) * s // steps
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    put(x + dx, y + dy, _BLUE)
    for x, y in points:
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                put(x + dx, y + dy, _BLUE)
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )
