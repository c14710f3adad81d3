"""Write the gym's OpenAPI document (what GET /openapi.json serves) as the TypeScript client's input.

    python3 scripts/dump_openapi.py openapi.json          # regenerate
    python3 scripts/dump_openapi.py --check openapi.json  # exit 1 when the committed file is stale

The document is built from the app itself (`create_app().openapi()`, no server started), so the committed
`openapi.json`, and the types generated from it, follow every change to a route or a schema; the check
is what makes drift fail CI (tests/test_typescript_client.py runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gym_server.app import create_app
from gym_server.core.settings import Settings


def document() -> str:
    """The document as committed: two-space indents, keys in FastAPI's order, a final newline."""
    return json.dumps(create_app(Settings()).openapi(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true", help="compare with PATH instead of writing it")
    args = parser.parse_args()
    text = document()
    if not args.check:
        args.path.write_text(text, encoding="utf-8")
        return 0
    if args.path.exists() and args.path.read_text(encoding="utf-8") == text:
        return 0
    print(
        f"{args.path} is not the app's OpenAPI document: run `npm run generate` in clients/typescript",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
