"""The host side of a session's interpreter: start it in the sandbox, send cells, time them, restart it.

`PythonSession.run(code)` never raises for what the code does: a timeout, a crash of the interpreter or
an over-long output all come back as text the model reads (a timeout or a crash also restarts the
interpreter, and the text says that the variables are gone). Only a broken sandbox raises
`SandboxUnavailable`.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from gym_server.sdk.runtime import Sandbox, SpawnedProcess

__all__ = ["SERVER_SOURCE", "PythonSession"]

SERVER_SOURCE = (Path(__file__).resolve().parent / "_repl_server.py").read_text(encoding="utf-8")
MAX_REPLY = 1 << 20


class PythonSession:
    """One persistent interpreter in one sandbox; cells run one at a time."""

    def __init__(self, sandbox: Sandbox, *, max_output: int = 8192) -> None:
        self.sandbox = sandbox
        self.max_output = max_output
        self.process: SpawnedProcess | None = None
        self.restarts = 0

    def __repr__(self) -> str:
        return f"PythonSession(sandbox={self.sandbox.id!r}, restarts={self.restarts})"

    async def _ensure(self) -> SpawnedProcess:
        if self.process is None or not self.process.alive:
            self.process = await self.sandbox.spawn(["python3", "-I", "-u", "-c", SERVER_SOURCE])
        return self.process

    async def _restart(self) -> None:
        if self.process is not None:
            await self.process.kill()
        self.process = None
        self.restarts += 1

    async def run(self, code: str, timeout_s: float) -> str:
        """Run one cell; returns its output (and traceback), or a note on why there is none."""
        process = await self._ensure()
        data = json.dumps({"code": code, "max_output": self.max_output}).encode()
        try:
            await process.write(struct.pack(">I", len(data)) + data)
            size = struct.unpack(">I", await process.read(4, timeout_s))[0]
            if size > MAX_REPLY:
                raise EOFError("reply too large")
            reply = json.loads(await process.read(size, timeout_s))
        except TimeoutError:
            await self._restart()
            return (
                f"Error: the code did not finish within {timeout_s:g} s and was stopped. "
                "The interpreter was restarted: all variables and imports are gone."
            )
        except (EOFError, ValueError):
            await self._restart()
            return "Error: the interpreter exited. It was restarted: all variables and imports are gone."
        output = str(reply.get("output", ""))
        if reply.get("truncated"):
            output += f"\n[output truncated to {self.max_output} bytes]"
        return output if output.strip() else "(no output)"

    async def close(self) -> None:
        if self.process is not None:
            await self.process.kill()
            self.process = None
