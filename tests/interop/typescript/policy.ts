/**
 * The policy side of the agent tests: the bundled CPU policy server with the tiny model warmed up on
 * counter tool calls (the agent peers' shared warm-up, tests/interop/agent_policy.py; a
 * cold tiny model never calls a tool), and a recording pass-through in front of it, so a test holds the
 * policy's own answer to every call the gym's gateway forwarded, to compare with what the gym stored.
 */

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import { join } from "node:path";

import { python } from "./servers.ts";

const AGENT_POLICY = join(import.meta.dirname, "..", "agent_policy.py");

export interface WarmPolicy {
  folder: string;
  /** The counter tasks (inline) and seeds it was warmed on. */
  tasks: { task: Record<string, unknown>; seed: number }[];
}

/**
 * The agent peers' warmed tiny model (tests/interop/agent_policy.py, run by the project's python): built
 * once per content of its inputs and kept beside the peers' venvs (`$GYM_CI_CACHE/interop`, default
 * ~/.cache/gym-server/interop); run.sh builds it before any peer starts, so here it is only read, or
 * built against `gymUrl` (with `apiKey`) when this peer runs alone and the cache lacks it.
 */
export function warmPolicy(gymUrl: string, apiKey?: string): WarmPolicy {
  const env = apiKey ? { ...process.env, GYM_API_KEY: apiKey } : process.env; // the recipe reads the gym
  const printed = execFileSync(python(), [AGENT_POLICY, gymUrl], { env, stdio: ["ignore", "pipe", "inherit"] });
  const folder = printed.toString("utf8").trim().split("\n").pop()!;
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
