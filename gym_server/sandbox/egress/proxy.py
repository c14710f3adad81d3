"""The gym-side filtering proxy of one sandbox: a Unix socket that speaks HTTP CONNECT and plain HTTP.

A sandbox with an allow-list still has no network of its own (bubblewrap's `--unshare-net`, Docker's
`network_mode: none`). Its only way out is this socket, bind-mounted into the sandbox read-only with a
copy of the in-sandbox forwarder (`forward.py`), which relays connections to 127.0.0.1:`PROXY_PORT`
inside the sandbox to the socket. The proxy reads one request head, asks the `EgressPolicy`, and then
either refuses (403 with the reason, nothing connected) or connects to the checked addresses and
relays bytes both ways:

- `CONNECT host:port` (HTTPS and any other TCP): answered 200 once connected, then an opaque tunnel.
- `GET http://host:port/path` (plain HTTP): the request line is rewritten to origin form, hop-by-hop
  proxy headers are dropped, `Connection: close` is set (one request per connection, so a kept-alive
  connection cannot be reused for another host), then the rest is relayed.

Every attempt, allowed or refused, is logged with the session and counted (`EgressTally` for
/metrics, `EgressProxy.attempts` for the sandbox's owner). `aclose()` stops the server, cuts every
relayed connection and removes the socket's folder: the proxy lives exactly as long as its sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections import Counter, deque
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from gym_server.core.egress_policy import Decision, EgressPolicy

__all__ = ["FORWARDER", "SOCKET", "EgressProxy", "EgressTally", "tally"]

log = logging.getLogger(__name__)

SOCKET = "proxy.sock"
FORWARDER = "forward.py"
_HEAD_LIMIT = 16 * 1024
_HEAD_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024
_RECENT = 256  # attempts kept per proxy for inspection; the log has them all
_DROPPED_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}


class EgressTally:
    """Process-wide counts of egress attempts by decision, for /metrics (see `EgressCollector`)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, decision: Decision) -> None:
        self.counts["allowed" if decision.allowed else "refused"] += 1


tally = EgressTally()


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    host: str
    port: int
    head: bytes  # what is sent upstream before relaying (plain HTTP); empty for CONNECT


class _BadRequest(ValueError):
    """The connection did not open with a proxy request this proxy serves."""


class EgressProxy:
    """The proxy of one sandbox, serving on `<folder>/proxy.sock` until `aclose()`.

    Args:
        policy: what may be reached, with the operator's caps (open connections, connect timeout).
        session_id: names the sandbox's session in every log line.
    """

    def __init__(self, policy: EgressPolicy, *, session_id: str | None = None) -> None:
        self.policy = policy
        self.session_id = session_id
        self.folder: Path | None = None
        self.attempts: deque[Decision] = deque(maxlen=_RECENT)
        self.counts: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._open = 0

    def __repr__(self) -> str:
        return f"EgressProxy(session={self.session_id!r}, folder={self.folder}, {dict(self.counts)})"

    @property
    def socket_path(self) -> Path:
        if self.folder is None:
            raise RuntimeError("the egress proxy is not started")
        return self.folder / SOCKET

    async def start(self, parent: Path | None = None) -> Path:
        """Create the folder (socket + forwarder) under `parent` and start serving; returns the folder.

        The folder and the socket are open to every uid: sandboxes run as uids of their own, and the
        folder holds nothing but this sandbox's socket and the forwarder's source.
        """
        folder = await asyncio.to_thread(_make_folder, parent or Path(tempfile.gettempdir()) / "gym-egress")
        try:
            self._server = await asyncio.start_unix_server(
                self._accept, path=str(folder / SOCKET), limit=_HEAD_LIMIT
            )
            await asyncio.to_thread((folder / SOCKET).chmod, 0o666)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        self.folder = folder
        return folder

    async def aclose(self) -> None:
        """Stop serving, cut every open connection, remove the folder; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self.folder is not None:
            await asyncio.to_thread(shutil.rmtree, self.folder, True)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer), name="gym-egress")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), _HEAD_TIMEOUT_S)
            except (ValueError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                await _answer(writer, 400, f"not a proxy request: {exc or type(exc).__name__}")
                return
            if self._open >= self.policy.max_connections:
                cap = f"over {self.policy.max_connections} open connections"
                self._record(Decision(request.host, request.port, False, cap))
                await _answer(writer, 403, f"egress refused: {cap}")
                return
            self._open += 1  # the slot is taken before the first await, so the cap holds under a burst
            try:
                decision = await self.policy.decide(request.host, request.port)
                self._record(decision)
                if not decision.allowed:
                    await _answer(writer, 403, f"egress refused: {decision.reason}")
                    return
                opened = await self._connect(decision)
                if opened is None:
                    await _answer(writer, 502, f"could not connect to {decision.host}:{decision.port}")
                    return
                up_reader, upstream = opened
                if request.method == "CONNECT":
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream.write(request.head)
                await _relay(reader, writer, up_reader, upstream)
            finally:
                self._open -= 1
        except (ConnectionError, OSError):
            pass
        finally:
            for stream in (upstream, writer):
                if stream is not None:
                    stream.close()

    async def _connect(self, decision: Decision) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the first checked address that answers; the name is never resolved again."""
        for address in decision.addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), decision.port), self.policy.connect_timeout_s
                )
            except (OSError, TimeoutError):
                continue
        return None

    def _record(self, decision: Decision) -> None:
        self.attempts.append(decision)
        self.counts["allowed" if decision.allowed else "refused"] += 1
        tally.add(decision)
        log.info(
            "sandbox egress %s: session=%s %s:%d (%s)",
            "allowed" if decision.allowed else "refused",
            self.session_id,
            decision.host,
            decision.port,
            decision.reason,
        )


def _make_folder(base: Path) -> Path:
    """A fresh folder under `base` holding a copy of the forwarder, readable by every uid."""
    base.mkdir(mode=0o711, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="egress-", dir=base))
    folder.chmod(0o755)
    source = resources.files("gym_server.sandbox.egress").joinpath(FORWARDER).read_bytes()
    (folder / FORWARDER).write_bytes(source)
    (folder / FORWARDER).chmod(0o644)
    return folder


async def _read_request(reader: asyncio.StreamReader) -> _Request:
    """The first request head, parsed into a destination and what to send upstream."""
    head = await reader.readuntil(b"\r\n\r\n")  # the stream's limit (_HEAD_LIMIT) bounds it
    line, _, rest = head.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise _BadRequest("malformed request line")
    if any(byte < 0x21 or byte > 0x7E for byte in parts[1]):  # the target goes into log lines
        raise _BadRequest("the target must be printable ASCII")
    method, target, version = (part.decode("latin-1") for part in parts)
    if method == "CONNECT":
        host, port = _authority(target)
        return _Request(method, host, port, b"")
    url = urlsplit(target)
    if url.scheme != "http" or not url.netloc:
        raise _BadRequest("send http:// URLs in absolute form, and use CONNECT for anything else")
    try:
        port = url.port or 80
    except ValueError:
        raise _BadRequest(f"{url.netloc!r} has no valid port") from None
    if "@" in url.netloc or not url.hostname:
        raise _BadRequest("the URL must name a host, without credentials")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [
        h for h in rest.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in _DROPPED_HEADERS
    ]
    upstream = [f"{method} {path} {version}".encode("latin-1"), *headers, b"Connection: close", b"", b""]
    return _Request(method, host, port, b"\r\n".join(upstream))


def _authority(text: str) -> tuple[str, int]:
    if "@" in text:
        raise _BadRequest("credentials in the target are not accepted")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535 or not host:
        raise _BadRequest(f"{text!r} is not host:port")
    return host, int(port)


async def _answer(writer: asyncio.StreamWriter, status: int, detail: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (detail + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nX-Gym-Egress: refused\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()


async def _relay(
    client_reader: asyncio.StreamReader,
    client: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both sides are done (a half-close is passed on, not treated as the end)."""

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(_CHUNK):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except (ConnectionError, OSError):
            sink.close()

    await asyncio.gather(pump(client_reader, upstream), pump(upstream_reader, client))
