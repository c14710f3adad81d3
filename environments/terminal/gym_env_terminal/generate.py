"""Generate the `terminal` tasks: shell chores over files, text and archives, with their state checks.

Each family builds a small file tree from a seeded `random.Random` (text files travel in the task's
public metadata, `files`; archives are made from them by a trusted `setup` command when the episode
starts), a prompt, the checks the final work dir must pass (`answer.checks`) and a reference shell
command that solves it (`answer.solution`, hidden like the checks). Rerunning writes byte-identical files.

    python -m gym_env_terminal.generate   # writes
    datasets/gym_datasets/terminal/{train,validation}.jsonl
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["FAMILIES", "SEED", "TASK_COUNT", "build_tasks", "write"]

SEED = 20_251_125
TASK_COUNT = 120
VALIDATION_EVERY = 5
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
ACTIONS = ["login", "logout", "upload", "download", "delete", "share"]
LEVELS = ["INFO", "INFO", "INFO", "WARN", "ERROR"]
CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Accra", "Quito", "Hanoi", "Perth", "Porto", "Dakar"]
WORDS = ["river", "stone", "cloud", "ember", "maple", "harbor", "lantern", "meadow", "copper", "willow"]
Family = Callable[[random.Random], dict[str, Any]]


def _count_matches(rng: random.Random) -> dict[str, Any]:
    user, level = rng.choice(USERS), rng.choice(["ERROR", "WARN"])
    files, count = {}, 0
    for index in range(rng.randint(3, 5)):
        lines = []
        for second in range(rng.randint(20, 60)):
            who, what, lvl = rng.choice(USERS), rng.choice(ACTIONS), rng.choice(LEVELS)
            count += who == user and lvl == level
            lines.append(
                f"2025-03-{index + 1:02d} 10:{second // 60:02d}:{second % 60:02d} {lvl} user={who} {what}"
            )
        files[f"logs/app-{index + 1}.log"] = "\n".join(lines) + "\n"
    return {
        "prompt": (
            f"The archive logs.tar.gz holds a folder of log files. Extract it and count the lines, across "
            f"all the files, whose level is {level} and that mention user={user}. Write that number alone "
            "to /work/out.txt."
        ),
        "files": files,
        "setup": "tar czf logs.tar.gz logs && rm -r logs",
        "checks": [{"kind": "file", "path": "out.txt", "content": str(count)}],
        "solution": (
            f"tar xzf logs.tar.gz && cat logs/*.log | grep ' {level} ' | grep -c 'user={user} ' > out.txt"
        ),
    }


def _rename(rng: random.Random) -> dict[str, Any]:
    numbers = sorted(rng.sample(range(1, 9999), rng.randint(4, 9)))
    files = {f"photos/IMG_{n:04d}.JPEG": f"jpeg bytes of shot {n}\n" for n in numbers}
    keep = {"photos/notes.txt": "shot list\n", f"photos/IMG_{numbers[0]:04d}.png": "a png\n"}
    files.update(keep)
    names = sorted([f"photo_{n:04d}.jpg" for n in numbers] + [Path(path).name for path in keep])
    sample = rng.choice(numbers)
    return {
        "prompt": (
            "In /work/photos, rename every file named IMG_<digits>.JPEG to photo_<digits>.jpg, keeping the "
            "digits (IMG_0042.JPEG becomes photo_0042.jpg). Leave every other file as it is."
        ),
        "files": files,
        "setup": "",
        "checks": [
            {"kind": "listing", "path": "photos", "names": names},
            {
                "kind": "file",
                "path": f"photos/photo_{sample:04d}.jpg",
                "content": f"jpeg bytes of shot {sample}",
            },
        ],
        "solution": 'cd photos && for f in IMG_*.JPEG; do n=${f#IMG_}; mv "$f" "photo_${n%.JPEG}.jpg"; done',
    }


def _distinct(rng: random.Random) -> dict[str, Any]:
    threshold = rng.randint(300, 700)
    rows = [(n, rng.choice(CITIES), rng.randint(1, 999)) for n in range(1, rng.randint(30, 70))]
    wanted = sorted({city for _, city, amount in rows if amount > threshold})
    text = "id,city,amount\n" + "".join(f"{n},{city},{amount}\n" for n, city, amount in rows)
    return {
        "prompt": (
            "/work/sales.csv has the columns id,city,amount. Write the distinct cities that have at least "
            f"one row with amount greater than {threshold}, sorted alphabetically, one per line, to "
            "/work/out.txt."
        ),
        "files": {"sales.csv": text},
        "setup": "",
        "checks": [{"kind": "file", "path": "out.txt", "content": "\n".join(wanted)}],
        "solution": f"awk -F, 'NR > 1 && $3 > {threshold} {{print $2}}' sales.csv | sort -u > out.txt",
    }


def _cleanup(rng: random.Random) -> dict[str, Any]:
    files: dict[str, str] = {}
    for folder in ["project", "project/src", "project/src/util", "project/build"]:
        for _ in range(rng.randint(1, 3)):
            stem = rng.choice(WORDS) + str(rng.randint(1, 99))
            files[f"{folder}/{stem}.{rng.choice(['c', 'h', 'o', 'txt'])}"] = f"{stem}\n"
            files[f"{folder}/{stem}-{rng.randint(1, 9)}.tmp"] = "scratch\n"
    temporary = sorted(path for path in files if path.endswith(".tmp"))
    kept = sorted(path for path in files if not path.endswith(".tmp"))
    checks = [{"kind": "absent", "path": path} for path in temporary]
    checks += [{"kind": "file", "path": path, "content": files[path].strip()} for path in kept]
    return {
        "prompt": (
            "Delete every file ending in .tmp anywhere under /work/project (at any depth). "
            "Keep every other file exactly as it is."
        ),
        "files": files,
        "setup": "",
        "checks": checks,
        "solution": "find project -type f -name '*.tmp' -delete",
    }


def _bundle(rng: random.Random) -> dict[str, Any]:
    files: dict[str, str] = {}
    for _ in range(rng.randint(3, 6)):
        stem = rng.choice(WORDS) + f"-{rng.randint(1, 99)}"
        files[f"reports/{stem}.{rng.choice(['md', 'md', 'txt', 'csv'])}"] = f"# {stem}\n{rng.random():.6f}\n"
    if not any(path.endswith(".md") for path in files):
        files["reports/summary.md"] = "# summary\n"
    members = {path: text.strip() for path, text in sorted(files.items()) if path.endswith(".md")}
    return {
        "prompt": (
            "Create the gzip-compressed tar archive /work/bundle.tar.gz holding only the .md files of "
            "/work/reports, stored as reports/<name>.md. Do not include any other file."
        ),
        "files": files,
        "setup": "",
        "checks": [{"kind": "archive", "path": "bundle.tar.gz", "members": members}],
        "solution": "tar czf bundle.tar.gz reports/*.md",
    }


def _top_word(rng: random.Random) -> dict[str, Any]:
    while True:
        words = [rng.choice(WORDS) for _ in range(rng.randint(80, 160))]
        counts = Counter(words).most_common()
        if len(counts) < 2 or counts[0][1] > counts[1][1]:
            break
    lines, text = [], []
    for word in words:
        text.append(word.capitalize() if rng.random() < 0.3 else word)
        if len(text) >= rng.randint(6, 12):
            lines.append(" ".join(text) + rng.choice([".", ",", "!", ";"]))
            text = []
    lines.append(" ".join(text))
    return {
        "prompt": (
            "Which word occurs most often in /work/story.txt? Compare words case-insensitively (a word is a "
            "run of letters). Write the word alone, in lower case, to /work/out.txt."
        ),
        "files": {"story.txt": "\n".join(lines) + "\n"},
        "setup": "",
        "checks": [{"kind": "file", "path": "out.txt", "content": counts[0][0]}],
        "solution": (
            "tr -cs 'A-Za-z' '\\n' < story.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c "
            "| sort -rn | head -1 | awk '{print $2}' > out.txt"
        ),
    }


FAMILIES: list[Family] = [_count_matches, _rename, _distinct, _cleanup, _bundle, _top_word]


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    """Every task in id order; families round-robin so each appears in both splits."""
    rng = random.Random(seed)
    tasks = []
    for number in range(count):
        family = FAMILIES[number % len(FAMILIES)]
        made = family(rng)
        tasks.append(
            Task(
                id=f"terminal-{number:04d}",
                prompt=made["prompt"],
                answer={"checks": made["checks"], "solution": made["solution"]},
                metadata={
                    "family": family.__name__.lstrip("_"),
                    "files": made["files"],
                    "setup": made["setup"],
                },
            )
        )
    return tasks


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/terminal/` and return their sizes."""
    return write_dataset(root / "terminal", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
