#!/usr/bin/env python3
"""Container health check: exit 0 when the server's /readyz answers 200, else 1 (the reason on stderr).

/readyz is 200 while the database is reachable, the trajectory writer keeps up, and the sandbox backend
the server chose still answers (a silent Docker engine, or bubblewrap that can no longer make namespaces,
turns it 503). A server whose `auto` choice found no backend at all stays ready: only environments that
run code need one, and they report the reason themselves.

Reads GYM_HOST and GYM_PORT like the server does; a wildcard bind is probed on loopback. Standard library
only, so it runs with any python3 in the image.
"""

import os
import sys
import urllib.error
import urllib.request

host = os.environ.get("GYM_HOST", "127.0.0.1")
if host in ("", "0.0.0.0", "::", "[::]"):
    host = "127.0.0.1"
port = os.environ.get("GYM_PORT", "8000")
url = f"http://{host}:{port}/readyz"
timeout = float(os.environ.get("GYM_HEALTHCHECK_TIMEOUT_S", "3"))
try:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        sys.exit(0 if reply.status == 200 else 1)
except urllib.error.HTTPError as exc:
    print(f"{url}: {exc.code} {exc.read(500).decode(errors='replace')}", file=sys.stderr)
except OSError as exc:
    print(f"{url}: {exc}", file=sys.stderr)
sys.exit(1)
