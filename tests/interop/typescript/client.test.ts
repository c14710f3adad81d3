/**
 * The generated TypeScript client (clients/typescript) against a real gym that requires API keys: list
 * environments, play a `counter` episode to its reward, read the stored rollout, and meet the gym's
 * problem+json errors as typed `GymProblemError`s.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { GymClient, GymProblemError, type Schemas } from "../../../clients/typescript/src/index.ts";
import { createKey, eventually, startGym, type Server } from "./servers.ts";

let gym: Server;
let key: string;
let client: GymClient;

before(async () => {
  gym = await startGym({ GYM_AUTH__MODE: "on" }, (folder) => {
    key = createKey(folder, "acme", "admin");
  });
  client = new GymClient({ baseUrl: gym.url, apiKey: key });
});

after(async () => {
  await gym?.stop();
});

function call(name: string, args: Record<string, unknown> = {}): Schemas["Message"] {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call-${name}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

/** The stored trajectory once it has `status` (the gym's writer batches). */
function stored(id: string, status: Schemas["TrajectoryStatus"]): Promise<Schemas["TrajectoryRecord"]> {
  return eventually(async () => {
    try {
      const record = await client.rollout(id);
      return record.status === status ? record : undefined;
    } catch (error) {
      if (error instanceof GymProblemError && error.status === 404) return undefined; // not written yet
      throw error;
    }
  }, `rollout ${id} ${status}`);
}

test("lists the environments, counter among them", async () => {
  const listed = await client.environments();
  const names = listed.environments.map((env) => env.name);
  assert.ok(names.includes("counter"), `counter not in ${names.join(", ")}`);
});

test("plays counter to reward 1 and reads the stored rollout", async () => {
  // counter-0000 with seed 0 starts at 20 and targets 26 (its golden fixture).
  const session = await client.createSession({ env: "counter", task_id: "counter-0000", seed: 0, run: "ts-client" });
  assert.equal(session.env, "counter");
  const tools = session.tools.map((tool) => (tool as { function: { name: string } }).function.name);
  assert.deepEqual(tools.sort(), ["add", "read", "submit"]);

  const read = await client.step(session.session_id, { message: call("read") });
  assert.equal(read.done, false);
  assert.equal(read.messages[0]?.content, "20");
  assert.equal((await client.step(session.session_id, { message: call("add", { amount: 6 }) })).done, false);
  assert.equal((await client.session(session.session_id)).session_id, session.session_id);

  const submitted = await client.step(session.session_id, { message: call("submit") });
  assert.equal(submitted.done, true);
  assert.equal(submitted.reward, 1);
  await client.closeSession(session.session_id);

  const record = await stored(session.session_id, "completed");
  assert.equal(record.reward, 1);
  assert.equal(record.run, "ts-client");
  assert.equal((record.messages ?? []).filter((message) => message.role === "assistant").length, 3);
  // The generic, route-typed call reaches the same record.
  const same = await client.request("get", "/v1/rollouts/{rollout_id}", { path: { rollout_id: session.session_id } });
  assert.equal(same.id, record.id);
});

test("a closed episode is stored as abandoned, and stepping it is a typed 410", async () => {
  const session = await client.createSession({ env: "counter", task_id: "counter-0001", seed: 1 });
  await client.closeSession(session.session_id);
  await assert.rejects(client.step(session.session_id, { message: call("read") }), (error: unknown) => {
    assert.ok(error instanceof GymProblemError);
    assert.equal(error.status, 410);
    assert.equal(error.problem.status, 410);
    assert.match(error.problem.type, /^urn:gym-server:problem:/);
    return true;
  });
  assert.equal((await stored(session.session_id, "abandoned")).reward, null);
});

test("problem+json errors surface as GymProblemError with their type, status and detail", async () => {
  await assert.rejects(client.session("no-such-session"), (error: unknown) => {
    assert.ok(error instanceof GymProblemError);
    assert.equal(error.status, 404);
    assert.equal(error.slug, "session-not-found");
    assert.match(error.problem.detail, /no-such-session/);
    return true;
  });
  await assert.rejects(client.createSession({ env: "no-such-env" }), (error: unknown) => {
    assert.ok(error instanceof GymProblemError);
    assert.equal(error.status, 404);
    assert.equal(error.slug, "environment-not-found");
    return true;
  });
  // A body the schema refuses: 422 in the gym's problem shape, naming the field.
  await assert.rejects(client.createSession({ env: "" }), (error: unknown) => {
    assert.ok(error instanceof GymProblemError);
    assert.equal(error.status, 422);
    assert.match(JSON.stringify(error.problem), /env/);
    return true;
  });
});

test("without the key, or with a wrong one, the gym answers a typed 401", async () => {
  const wrongSecret = `${key.slice(0, -4)}${key.endsWith("aaaa") ? "bbbb" : "aaaa"}`;
  for (const apiKey of [undefined, wrongSecret]) {
    await assert.rejects(new GymClient({ baseUrl: gym.url, apiKey }).environments(), (error: unknown) => {
      assert.ok(error instanceof GymProblemError);
      assert.equal(error.status, 401);
      assert.match(error.problem.type, /^urn:gym-server:problem:/);
      return true;
    });
  }
});

test("forks an episode at a turn: the forks hold its messages and go their own ways", async () => {
  const session = await client.createSession({ env: "counter", task_id: "counter-0000", seed: 0, run: "ts-fork" });
  await client.step(session.session_id, { message: call("read") });
  await client.step(session.session_id, { message: call("add", { amount: 6 }) });
  const forked = await client.fork(session.session_id, { turn: 1, n: 2 });
  assert.equal(forked.parent_id, session.session_id);
  assert.equal(forked.forks.length, 2);
  const [first, second] = forked.forks;
  assert.ok(first && second);
  assert.equal(first.parent_turn, 1);
  assert.equal(first.messages.length, 4); // system, user, the read and its answer
  assert.equal((await client.step(first.session_id, { message: call("add", { amount: 6 }) })).messages[0]?.content, "26");
  assert.equal((await client.step(second.session_id, { message: call("add", { amount: 1 }) })).messages[0]?.content, "21");
  await assert.rejects(client.fork(session.session_id, { turn: 9 }), (error: unknown) => {
    assert.ok(error instanceof GymProblemError);
    assert.equal(error.status, 422);
    return true;
  });
  for (const id of [session.session_id, first.session_id, second.session_id]) await client.closeSession(id);
});
