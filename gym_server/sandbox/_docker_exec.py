"""One `docker exec` with stdin, both output streams capped, and an exit code (blocking, run on a thread).

The docker SDK's `exec_run` cannot feed stdin, and tmpfs mounts are invisible to `put_archive`, so
everything goes through the raw exec API: create the exec, hijack its connection, send stdin, half-close
the write side (the engine turns that into EOF on the program's stdin), then read the multiplexed frames
until the program and all holders of its pipes are gone. `abort()` shuts the socket from another thread
when the host's own deadline passes.

The wrapper shell script is what makes "nothing outlives its exec" true: it kills every process of the
sandbox user before and after the command (the sandbox's main process runs as another uid and survives),
and runs the command under `timeout -s KILL`, which kills the command's whole process group.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from docker.utils.socket import frames_iter

from gym_server.sandbox.protocol import CappedBuffer

__all__ = ["ExecChannel", "kill_all_argv", "put_file_argv", "scrub_argv", "wrap_command"]

_STDOUT, _STDERR = 1, 2

# `kill -9 -1` signals every process of the user but the caller. Its exit status cannot tell whether
# any were left (the kernel counts the main process of another uid and reports success), so the sweep
# looks in /proc for another process of its own uid, kills, and looks again until none is left
# (bounded to about half a second). With nothing to kill it costs one pass over /proc and no fork.
_SWEEP = (
    'uid=; while read -r k v _; do [ "$k" = Uid: ] && { uid=$v; break; }; done < /proc/self/status; '
    'others() { for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; u=; '
    '{ while read -r k v _; do [ "$k" = Uid: ] && { u=$v; break; }; done < "$p/status"; } 2>/dev/null; '
    '[ "$u" = "$uid" ] && return 0; done; return 1; }; '
    'n=0; while others && [ "$n" -lt 50 ]; do kill -9 -1 2>/dev/null; n=$((n+1)); sleep 0.01; done'
)

_WRAPPER = f"""t=$1; sweep=$2; shift 2
[ "$sweep" = 1 ] && {{ {_SWEEP}; }}
timeout -s KILL "$t" "$@"
rc=$?
[ "$sweep" = 1 ] && {{ {_SWEEP}; }}
exit $rc"""

_PUT = 'mkdir -p -- "$(dirname -- "$1")" && test ! -L "$1" && cat > "$1"'


def wrap_command(argv: list[str], timeout_s: float, *, sweep: bool = True) -> list[str]:
    """The argv that runs `argv` under the in-container deadline and (with `sweep`) the cleanup.

    Without `sweep` (while a spawned process lives in the sandbox) only the command's own process
    group is killed at the deadline; background processes it detached survive until the sandbox closes.
    """
    return ["/bin/sh", "-c", _WRAPPER, "gym-exec", f"{timeout_s:.3f}", "1" if sweep else "0", *argv]


def kill_all_argv() -> list[str]:
    return ["/bin/sh", "-c", f"{_SWEEP}; true"]


def scrub_argv() -> list[str]:
    """Kill every process of the sandbox user and empty the writable folders."""
    return ["/bin/sh", "-c", f"{_SWEEP}; find /work /tmp /dev/shm -mindepth 1 -delete 2>/dev/null; true"]


def put_file_argv(path: str) -> list[str]:
    return ["/bin/sh", "-c", _PUT, "gym-put", path]


class ExecChannel:
    """A single exec in one container; `run` blocks, `abort` may be called from any thread."""

    def __init__(self, api: Any, container_id: str, user: str) -> None:
        self.api = api
        self.container_id = container_id
        self.user = user
        self._socket: Any = None
        self._aborted = threading.Event()

    def run(
        self,
        argv: list[str],
        stdin: bytes | None,
        env: dict[str, str],
        cwd: str,
        out: CappedBuffer,
        err: CappedBuffer,
    ) -> int | None:
        """Run to the end; returns the exit code (None if aborted). Docker errors propagate."""
        created = self.api.exec_create(
            self.container_id,
            argv,
            stdin=True,
            stdout=True,
            stderr=True,
            user=self.user,
            environment=env,
            workdir=cwd,
        )
        exec_id = created["Id"]
        conn = self.api.exec_start(exec_id, socket=True)
        self._socket = conn
        raw: socket.socket = getattr(conn, "_sock", conn)
        try:
            if stdin:
                with contextlib.suppress(OSError):
                    raw.sendall(stdin)
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_WR)
            for stream, data in frames_iter(conn, tty=False):
                if self._aborted.is_set():
                    break
                (out if stream == _STDOUT else err).write(data)
        except OSError:
            if not self._aborted.is_set():
                raise
        finally:
            with contextlib.suppress(OSError):
                conn.close()
        if self._aborted.is_set():
            return None
        code = self.api.exec_inspect(exec_id).get("ExitCode")
        return int(code) if code is not None else None

    def abort(self) -> None:
        """Stop reading; the blocked `run` returns None."""
        self._aborted.set()
        raw = getattr(self._socket, "_sock", self._socket)
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)
