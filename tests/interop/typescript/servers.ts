/**
 * Real gym and policy servers on loopback for the TypeScript peer's tests (as tests/interop/gym_servers.py
 * does for the Python peers): `gym-server serve` and `gym-server policy serve`, each a child process of the
 * project's python (`GYM_INTEROP_PYTHON`, set by `make interop`), on a free port, with its own temporary
 * folder and SQLite file. The tests reach them over HTTP only, as a TypeScript agent reaches a gym.
 */

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const READY_S = 120;

/** A server process, its URL and its log (printed when it fails to start). */
export interface Server {
  url: string;
  folder: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export function python(): string {
  const found = process.env.GYM_INTEROP_PYTHON;
  if (!found) throw new Error("GYM_INTEROP_PYTHON must name the project's python (run `make interop PEER=typescript`)");
  return found;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

async function answers(url: string): Promise<boolean> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(5000) })).ok;
  } catch {
    return false; // not listening yet
  }
}

async function start(
  name: string,
  args: string[],
  env: Record<string, string>,
  probe: string,
  prepare: (folder: string) => void = () => {},
): Promise<Server> {
  const folder = mkdtempSync(join(tmpdir(), `gym-ts-${name}-`));
  prepare(folder);
  const port = await freePort();
  const log = join(folder, `${name}.log`);
  const out = openSync(log, "w");
  const child = spawn(python(), ["-m", "gym_server.cli.main", ...args, "--port", String(port)], {
    env: { ...process.env, ...env, GYM_DATABASE_URL: databaseUrl(folder) },
    stdio: ["ignore", out, out],
  });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const server: Server = {
    url,
    folder,
    process: child,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
  const deadline = Date.now() + READY_S * 1000;
  while (!(await answers(url + probe))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${name} did not become ready:\n${readFileSync(log, "utf8").slice(-4000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return server;
}

/** The SQLite URL of the gym whose folder is `folder`. */
export function databaseUrl(folder: string): string {
  return `sqlite:///${join(folder, "gym.db")}`;
}

/** A key made as a user makes one (`gym-server keys create`) in the database of the gym in `folder`. */
export function createKey(folder: string, tenant: string, scope: string): string {
  const args = ["-m", "gym_server.cli.main", "keys", "create", "--tenant", tenant, "--scope", scope];
  return execFileSync(python(), [...args, "--database-url", databaseUrl(folder)], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
  }).trim();
}

/** `gym-server serve` with `settings` (GYM_... variables) over the defaults the peers use; `prepare` runs on
 * its folder before it starts (to create keys in its database). */
export function startGym(
  settings: Record<string, string> = {},
  prepare?: (folder: string) => void,
): Promise<Server> {
  return start(
    "gym",
    ["serve", "--host", "127.0.0.1"],
    {
      GYM_SERVER_NAME: `interop-ts-${process.pid}-${Date.now()}`,
      GYM_STORE__FLUSH_INTERVAL_S: "0.02",
      GYM_SANDBOX__BACKEND: "unsafe-no-sandbox",
      ...settings,
    },
    "/readyz",
    prepare,
  );
}

/** `gym-server policy serve --model <model>`: the CPU policy server (vLLM-shaped token ids and logprobs). */
export function startPolicy(model: string, servedName: string): Promise<Server> {
  return start(
    "policy",
    ["policy", "serve", "--model", model, "--served-model-name", servedName, "--threads", "1", "--host", "127.0.0.1"],
    { HF_HUB_OFFLINE: "1" },
    "/v1/models",
  );
}

/** Poll `read` until it gives a value (the gym's writer batches trajectories to the database). */
export async function eventually<T>(read: () => Promise<T | undefined>, what: string, seconds = 30): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await read();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not seen after ${seconds} s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
