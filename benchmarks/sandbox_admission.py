"""Host memory taken by a burst of code verifications, with the sandbox cap at its default and at 12.

Starts a real `gym-server serve` (bubblewrap) per configuration, then sends twelve concurrent
`POST /v1/verify` calls of a HumanEval task whose candidate holds about `--mb` MiB (touched, so resident)
for `--hold-s` seconds before passing. A thread samples the host's used memory (MemTotal - MemAvailable)
every 20 ms; the figure is the peak over the idle baseline taken just before the burst, with the
admission's high-water mark and the load average beside it.

    python benchmarks/sandbox_admission.py            # default settings, then GYM_SANDBOX__MAX_RUNNING=12
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TASK = "humaneval-002"  # truncate_number


def used_mb() -> float:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


class Peak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = used_mb()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, used_mb())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(env: dict[str, str], folder: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    environ = {
        **os.environ,
        "GYM_SERVER_NAME": f"admission-bench-{port}",
        "GYM_DATABASE_URL": f"sqlite:///{folder}/gym-{port}.db",
        "GYM_SANDBOX__BACKEND": "bubblewrap",
        **env,
    }
    argv = [sys.executable, "-m", "gym_server.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(argv, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("server did not become ready")


async def burst(url: str, calls: int, mb: int, hold_s: float) -> dict[str, Any]:
    completion = (
        "```python\nimport time\n"
        f"held = b'x' * ({mb} * 1024 * 1024)\ntime.sleep({hold_s})\n\n"
        "def truncate_number(number):\n    return number % 1.0\n```"
    )
    body = {"env": "humaneval", "task_id": TASK, "completion": completion}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await client.post("/v1/verify", json={**body, "completion": completion.replace(str(mb), "1")})
        await asyncio.sleep(1.0)  # the warm-up's sandbox scrubbed and memory settled
        sampler = Peak()
        baseline = used_mb()
        sampler.start()
        started = time.perf_counter()
        replies = await asyncio.gather(*(client.post("/v1/verify", json=body) for _ in range(calls)))
        elapsed = time.perf_counter() - started
        sampler.stop.set()
        sampler.join()
        admission = (await client.get("/readyz")).json()["sandbox"]["admission"]
    statuses: dict[str, int] = {}
    for reply in replies:
        key = str(reply.status_code) if reply.status_code != 200 else f"200 reward {reply.json()['reward']}"
        statuses[key] = statuses.get(key, 0) + 1
    return {
        "growth_mb": round(sampler.peak - baseline),
        "baseline_mb": round(baseline),
        "peak_running": admission["peak"],
        "max_running": admission["max_running"],
        "memory_budget_mb": admission["memory_budget_mb"],
        "cpu_budget": admission["cpu_budget"],
        "seconds": round(elapsed, 2),
        "replies": statuses,
        "load1": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--mb", type=int, default=200, help="MiB each candidate holds (sandboxes: 256)")
    parser.add_argument("--hold-s", type=float, default=1.0)
    args = parser.parse_args()
    configurations = {
        "default settings": {},
        "cap at 12": {"GYM_SANDBOX__MAX_RUNNING": "12", "GYM_SANDBOX__CPU_BUDGET": "12"},
    }
    with tempfile.TemporaryDirectory() as folder:
        for name, env in configurations.items():
            process, url = start_server(env, folder)
            try:
                result = asyncio.run(burst(url, args.calls, args.mb, args.hold_s))
            finally:
                process.terminate()
                process.wait(30)
            print(f"{name}: {result}", flush=True)


if __name__ == "__main__":
    main()
