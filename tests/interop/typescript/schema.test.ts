/**
 * The committed `clients/typescript/src/schema.ts` is what the client's own `generate:types` script
 * (openapi-typescript, the version this peer pins, the same as the client's) makes of the committed
 * `openapi.json`; tests/test_typescript_client.py checks that `openapi.json` is the app's current document.
 * Together: a change to the API that was not followed by `npm run generate` in clients/typescript fails CI.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { test } from "node:test";

const CLIENT = join(import.meta.dirname, "..", "..", "..", "clients", "typescript");

test("schema.ts is generated from the committed openapi.json", () => {
  const out = join(mkdtempSync(join(tmpdir(), "gym-ts-schema-")), "schema.ts");
  const script: string = JSON.parse(readFileSync(join(CLIENT, "package.json"), "utf8")).scripts["generate:types"];
  const bin = join(import.meta.dirname, "node_modules", ".bin");
  execFileSync("sh", ["-c", `${script} "$1"`, "generate", out], {
    cwd: CLIENT,
    env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH}` },
    stdio: "ignore",
  });
  const committed = readFileSync(join(CLIENT, "src", "schema.ts"), "utf8");
  assert.ok(committed === readFileSync(out, "utf8"), "clients/typescript/src/schema.ts is stale: run `npm run generate` there");
});
