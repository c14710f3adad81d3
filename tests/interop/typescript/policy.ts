/**
 * The policy side of the agent tests: the bundled CPU policy server with the tiny model warmed up on
 * counter tool calls (tests/interop/art/warm_policy.py, the recipe of `gym-server demo --model tiny`; a
 * cold tiny model never calls a tool), and a recording pass-through in front of it, so a test holds the
 * policy's own answer to every call the gym's gateway forwarded, to compare with what the gym stored.
 */

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

import { python } from "./servers.ts";

const ROOT = join(import.meta.dirname, "..", "..", "..");
const WARM_SCRIPT = join(ROOT, "tests", "interop", "art", "warm_policy.py");
/** What the warmed weights are a function of: the script and the recipe it runs. */
const WARM_INPUTS = [
  WARM_SCRIPT,
  join(ROOT, "trainer_adapters", "gym_trainer", "warmup.py"),
  join(ROOT, "trainer_adapters", "gym_trainer", "models.py"),
];

export interface WarmPolicy {
  folder: string;
  /** The counter tasks (inline) and seeds it was warmed on. */
  tasks: { task: Record<string, unknown>; seed: number }[];
}

/**
 * The warmed tiny model, built once per content of its inputs and kept beside the peers' venvs
 * (`$GYM_CI_CACHE/interop`, default ~/.cache/gym-server/interop): the warm-up is minutes of CPU on a
 * loaded machine, and its result depends only on those files (seeded).
 */
export function warmPolicy(gymUrl: string, apiKey?: string): WarmPolicy {
  const hash = createHash("sha256");
  for (const file of WARM_INPUTS) hash.update(readFileSync(file));
  const cacheRoot = process.env.GYM_CI_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "gym-server");
  const folder = join(cacheRoot, "interop", `typescript-warm-policy-${hash.digest("hex").slice(0, 16)}`);
  if (!existsSync(join(folder, "tasks.json"))) {
    mkdirSync(dirname(folder), { recursive: true });
    const building = mkdtempSync(`${folder}.building-`);
    try {
      const env = apiKey ? { ...process.env, GYM_API_KEY: apiKey } : process.env; // the recipe reads the gym
      execFileSync(python(), [WARM_SCRIPT, gymUrl, building], { env, stdio: ["ignore", "ignore", "inherit"] });
      rmSync(folder, { recursive: true, force: true });
      renameSync(building, folder); // whole or not at all: a second run never sees half a model
    } finally {
      rmSync(building, { recursive: true, force: true });
    }
  }
  return { folder, tasks: JSON.parse(readFileSync(join(folder, "tasks.json"), "utf8")) };
}

/** One call the pass-through forwarded: the path, the request the gym sent, the policy's answer. */
export interface PolicyCall {
  path: string;
  request: Record<string, unknown>;
  status: number;
  response: string;
}

/** A loopback pass-through to `target` that keeps every call and its answer, byte for byte. */
export interface RecordingProxy {
  url: string;
  calls: PolicyCall[];
  close(): Promise<void>;
}

export async function recordingProxy(target: string): Promise<RecordingProxy> {
  const calls: PolicyCall[] = [];
  const server: HttpServer = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    const upstream = await fetch(target + (req.url ?? "/"), {
      method: req.method,
      headers: { "content-type": req.headers["content-type"] ?? "application/json" },
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
    });
    const answer = await upstream.text();
    calls.push({ path: req.url ?? "/", request: body ? JSON.parse(body) : {}, status: upstream.status, response: answer });
    res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
    res.end(answer);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("the proxy has no port");
  return {
    url: `http://127.0.0.1:${address.port}`,
    calls,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
