"""Generate `gym_datasets/mcp_time/{train,validation}.jsonl`: time-zone questions with checked answers.

`mcp-server-time` converts a clock time *today* between IANA zones, so an answer that depends on daylight
saving time would change with the date the episode runs. Every zone used here has kept one UTC offset
all year (checked below in January and July with the generating machine's tz database), so each answer
holds on any date. Two kinds of task, seeded and deterministic:

- `convert`: the local time in zone B when it is HH:MM in zone A (one `convert_time` call);
- `arrival`: a flight leaves zone A at HH:MM local time and lands in zone B after a duration; the local
  time on landing (a conversion plus arithmetic the model must do itself).

Answers are the accepted spellings of HH:MM (`07:05`, and `7:05` for hours below 10), scored by
`verifiers.text.normalized_match`.

    python -m gym_env_mcp_tools.time.generate
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from gym_server.sdk.tasks import DATASETS_ROOT

__all__ = ["ZONES", "accepted", "make_task", "offset_minutes", "write"]

OUT = DATASETS_ROOT / "mcp_time"

# Zone, and the city a question names. All without daylight saving time (checked by `offset_minutes`).
ZONES = {
    "Etc/UTC": "UTC",
    "Asia/Tokyo": "Tokyo",
    "Asia/Kolkata": "Kolkata",
    "Asia/Kathmandu": "Kathmandu",
    "Asia/Shanghai": "Shanghai",
    "Asia/Singapore": "Singapore",
    "Asia/Dubai": "Dubai",
    "Asia/Karachi": "Karachi",
    "Asia/Dhaka": "Dhaka",
    "Asia/Bangkok": "Bangkok",
    "Asia/Kabul": "Kabul",
    "Australia/Brisbane": "Brisbane",
    "Australia/Darwin": "Darwin",
    "Pacific/Honolulu": "Honolulu",
    "America/Phoenix": "Phoenix",
    "America/Bogota": "Bogota",
    "America/Lima": "Lima",
    "Africa/Nairobi": "Nairobi",
    "Africa/Lagos": "Lagos",
    "Africa/Johannesburg": "Johannesburg",
}


def offset_minutes(zone: str) -> int:
    """The zone's UTC offset in minutes; refuses a zone whose offset differs between January and July."""
    offsets = {datetime(2026, month, 15, 12, tzinfo=ZoneInfo(zone)).utcoffset() for month in (1, 7)}
    if len(offsets) != 1:
        raise ValueError(f"{zone} observes daylight saving time; its answers would change with the date")
    (offset,) = offsets
    assert offset is not None
    return int(offset.total_seconds()) // 60


def accepted(minutes: int) -> list[str]:
    """The accepted spellings of a time of day given in minutes after midnight."""
    hour, minute = divmod(minutes % (24 * 60), 60)
    spellings = [f"{hour:02d}:{minute:02d}"]
    if hour < 10:
        spellings.append(f"{hour}:{minute:02d}")
    return spellings


def make_task(index: int, rng: random.Random) -> dict[str, Any]:
    source, target = rng.sample(sorted(ZONES), 2)
    start = rng.randrange(24 * 4) * 15 + rng.choice((0, 5, 10))
    clock = f"{start // 60:02d}:{start % 60:02d}"
    shift = offset_minutes(target) - offset_minutes(source)
    where = f"{ZONES[source]} ({source})"
    there = f"{ZONES[target]} ({target})"
    if index % 2 == 0:
        kind, minutes = "convert", start + shift
        prompt = f"When it is {clock} in {where}, what is the local time in {there}?"
        metadata: dict[str, Any] = {"kind": kind}
    else:
        hours, extra = rng.randrange(1, 15), rng.choice((0, 15, 30, 45))
        kind, minutes = "arrival", start + hours * 60 + extra + shift
        prompt = (
            f"A flight leaves {where} at {clock} local time and lands in {there} after "
            f"{hours} h {extra:02d} min. What is the local time in {ZONES[target]} when it lands?"
        )
        metadata = {"kind": kind, "duration_min": hours * 60 + extra}
    metadata.update({"source": source, "target": target, "time": clock})
    return {
        "id": f"mcp-time-{index:05d}",
        "prompt": prompt + " Answer with HH:MM (24-hour).",
        "answer": accepted(minutes),
        "metadata": metadata,
    }


def write(out: Path = OUT, *, seed: int = 12, train: int = 48, validation: int = 16) -> None:
    rng = random.Random(seed)
    tasks = [make_task(index, rng) for index in range(train + validation)]
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", tasks[:train]), ("validation", tasks[train:])):
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        (out / f"{name}.jsonl").write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    write(args.out, seed=args.seed)


if __name__ == "__main__":
    main()
