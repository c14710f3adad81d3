"""A loopback HTTP server for the sandbox egress tests (the only endpoints those tests reach)."""

from __future__ import annotations

import http.server
import socketserver
import threading


class EchoServer:
    """An HTTP server on 127.0.0.1 that answers every request with its request line and headers, or
    with N bytes for `/bytes/N` (to push volume through the proxy).

    `connections` counts accepted connections, so a test can tell a refusal by the proxy (no
    connection ever made) from one by the server.
    """

    def __init__(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def setup(self) -> None:
                owner.connections += 1
                super().setup()

            def do_GET(self) -> None:
                size = self.path.removeprefix("/bytes/")
                body = bytes(range(256)) * (int(size) // 256) if size.isdigit() else b""
                body = body or f"{self.requestline}\n{self.headers}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.connections = 0
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
