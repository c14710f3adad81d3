"""The interpreter loop that runs *inside* the sandbox, one per session; never imported by the server.

`repl.py` starts it with `python3 -I -u -c <this file>` through `Sandbox.spawn`. Requests and replies
are length-prefixed JSON frames on its stdin and on a duplicate of its stdout made before any user code
runs. Each cell's stdout and stderr (its subprocesses' included) go to a fresh capture file, read back
up to the requested size. Globals persist between cells; like a notebook, a cell ending in an expression
shows that expression's repr. Exceptions, `SystemExit` included, become a traceback in the output and
the interpreter carries on; anything that kills the process ends the session's state, and the host
starts a fresh interpreter. A process the cell forks (`os.fork()`, a fork bomb) exits when its copy of
the cell ends: only the interpreter itself reads requests and writes replies, so children never steal
the next request or answer it (found by `gym-server env check python_repl`).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import struct
import sys
import traceback
from typing import Any

CAPTURE = "/tmp/.gym-cell-output"


def main() -> None:
    requests = os.fdopen(os.dup(0), "rb", 0)
    replies = os.fdopen(os.dup(1), "wb", 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    owner = os.getpid()
    while True:
        head = requests.read(4)
        if len(head) < 4:
            return
        size = struct.unpack(">I", head)[0]
        body = b""
        while len(body) < size:
            chunk = requests.read(size - len(body))
            if not chunk:
                return
            body += chunk
        request = json.loads(body)
        reply = run_cell(request["code"], namespace, int(request.get("max_output", 8192)), owner)
        data = json.dumps(reply).encode()
        replies.write(struct.pack(">I", len(data)) + data)


def run_cell(code: str, namespace: dict[str, Any], max_output: int, owner: int) -> dict[str, Any]:
    capture = os.open(CAPTURE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the cell
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    ok = True
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
        exec(compile(tree, "<cell>", "exec"), namespace)
        if isinstance(last, ast.Expr):
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    except BaseException:
        ok = False
        kind, error, trace = sys.exc_info()
        while trace is not None and trace.tb_frame.f_code.co_filename != "<cell>":
            trace = trace.tb_next  # show the user's frames, not this loop's
        traceback.print_exception(kind, error, trace)
    if os.getpid() != owner:
        os._exit(0)  # a process the cell forked: only the interpreter answers the protocol
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    size = os.fstat(capture).st_size
    output = os.pread(capture, max_output, 0).decode("utf-8", "replace")
    os.close(capture)
    return {"output": output, "truncated": size > max_output, "ok": ok}


if __name__ == "__main__":
    main()
