"""The in-sandbox forwarder: 127.0.0.1:PORT inside the sandbox, relayed to the gym's proxy socket.

Copied next to the proxy's socket and run by the sandbox's own python3 (standard library only) before
each command of a sandbox with an allow-list: `python3 -I -S forward.py PORT SOCKET`. It binds the port
on the sandbox's private loopback, then forks: the parent exits at once, so the command starts only
once the port is ready, and the child relays every connection to the Unix socket until the sandbox's
command ends (bubblewrap's pid namespace, or the Docker exec's cleanup, takes it down with the rest).
One thread and one process whatever the traffic, so it costs one pid of the sandbox's pids limit.
The forwarder decides nothing: the gym's proxy applies the policy on the far side of the socket.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import sys

_CHUNK = 64 * 1024


class _Pipe:
    """One direction of a relayed connection: bytes read from `source` waiting to be sent to `sink`."""

    def __init__(self, source: socket.socket, sink: socket.socket) -> None:
        self.source, self.sink = source, sink
        self.pending = b""
        self.eof = False


def _serve(listener: socket.socket, target: str) -> None:
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    pipes: dict[socket.socket, list[_Pipe]] = {}  # a socket -> the pipes it reads for and writes for

    def interest(sock: socket.socket) -> None:
        events = 0
        for pipe in pipes.get(sock, []):
            if pipe.source is sock and not pipe.eof and not pipe.pending:
                events |= selectors.EVENT_READ
            if pipe.sink is sock and pipe.pending:
                events |= selectors.EVENT_WRITE
        if events and sock in selector.get_map():
            selector.modify(sock, events)
        elif events:
            selector.register(sock, events)
        elif sock in selector.get_map():
            selector.unregister(sock)

    def drop(sock: socket.socket) -> None:
        """Close a relayed connection: both of its sockets, each once."""
        pair = {end for pipe in pipes.pop(sock, []) for end in (pipe.source, pipe.sink)} | {sock}
        for end in pair:
            pipes.pop(end, None)
            if end.fileno() >= 0 and end in selector.get_map():
                selector.unregister(end)
            end.close()

    def done(sock: socket.socket) -> bool:
        return all(pipe.eof and not pipe.pending for pipe in pipes.get(sock, []))

    while True:
        for key, events in selector.select():
            sock = key.fileobj
            if sock is listener:
                try:
                    client, _ = listener.accept()
                except OSError:  # out of file descriptors, a connection reset while queued
                    continue
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    upstream.connect(target)
                except OSError:
                    client.close()
                    upstream.close()
                    continue
                for s in (client, upstream):
                    s.setblocking(False)
                both = [_Pipe(client, upstream), _Pipe(upstream, client)]
                pipes[client] = pipes[upstream] = both
                interest(client)
                interest(upstream)
                continue
            assert isinstance(sock, socket.socket)
            if sock not in pipes:
                continue
            try:
                for pipe in list(pipes[sock]):
                    if pipe.source is sock and events & selectors.EVENT_READ and not pipe.pending:
                        data = sock.recv(_CHUNK)
                        if data:
                            pipe.pending = data
                        else:
                            pipe.eof = True
                            pipe.sink.shutdown(socket.SHUT_WR)
                    if pipe.sink is sock and events & selectors.EVENT_WRITE and pipe.pending:
                        sent = sock.send(pipe.pending)
                        pipe.pending = pipe.pending[sent:]
            except BlockingIOError:
                pass
            except OSError:  # one connection failing never ends the others
                drop(sock)
                continue
            if done(sock):
                drop(sock)
                continue
            for pipe in pipes[sock]:
                interest(pipe.source)
                interest(pipe.sink)


def main(argv: list[str]) -> int:
    port, target = int(argv[1]), argv[2]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return 0  # a forwarder of this sandbox still serves (Docker, while a spawned process lives)
        raise
    listener.listen(128)
    if os.fork():
        return 0
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # never hold the command's pipes open: its exec ends when its output does
        os.dup2(devnull, fd)
    try:
        _serve(listener, target)
    finally:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
