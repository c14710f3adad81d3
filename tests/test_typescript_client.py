"""The TypeScript client's committed OpenAPI document is the app's current one.

`clients/typescript/src/schema.ts` is generated from `clients/typescript/openapi.json`; this test makes a
change to a route or a schema that was not followed by `npm run generate` fail here, and the
typescript interop peer (`make interop PEER=typescript`) checks that `schema.ts` is what openapi-typescript
makes of that document.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

CLIENT = Path(__file__).resolve().parent.parent / "clients" / "typescript"


def dumper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dump_openapi", CLIENT / "scripts" / "dump_openapi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_openapi_document_is_current() -> None:
    assert dumper().document() == (CLIENT / "openapi.json").read_text(encoding="utf-8"), (
        "clients/typescript/openapi.json is stale: run `npm run generate` in clients/typescript"
    )


def test_check_fails_on_a_stale_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text((CLIENT / "openapi.json").read_text().replace('"/v1/sessions"', '"/v1/old-sessions"'))
    monkeypatch.setattr("sys.argv", ["dump_openapi.py", "--check", str(stale)])
    assert dumper().main() == 1
    assert "npm run generate" in capsys.readouterr().err
