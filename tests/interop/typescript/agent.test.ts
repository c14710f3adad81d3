/**
 * The TypeScript agent (agent.ts: Vercel AI SDK + MCP TypeScript SDK) plays `counter` and `workplace`
 * through an episode's two URLs against the bundled CPU policy server. For each episode: every model call
 * the gym stored holds exactly the token ids and logprobs the policy answered (read from a recording
 * pass-through in front of the policy), the samples cover exactly the model's tokens, and the stored reward
 * is what a native replay of the stored transcript earns.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { GymClient, GymProblemError, type Schemas } from "../../../clients/typescript/src/index.ts";
import { playEpisode, type EpisodeResult } from "./agent.ts";
import { recordingProxy, warmPolicy, type RecordingProxy, type WarmPolicy } from "./policy.ts";
import { createKey, eventually, startGym, startPolicy, type Server } from "./servers.ts";

const MODEL = "tiny-counter";

let gym: Server;
let policy: Server;
let proxy: RecordingProxy;
let warm: WarmPolicy;
let client: GymClient;

let key: string;

before(async () => {
  // A gym that requires keys: the agent's key must reach both episode URLs (the provider's and the MCP
  // transport's headers).
  gym = await startGym({ GYM_AUTH__MODE: "on" }, (folder) => {
    key = createKey(folder, "acme", "admin");
  });
  client = new GymClient({ baseUrl: gym.url, apiKey: key });
  warm = warmPolicy(gym.url, key);
  policy = await startPolicy(warm.folder, MODEL);
  proxy = await recordingProxy(policy.url);
});

after(async () => {
  await proxy?.close();
  await policy?.stop();
  await gym?.stop();
});

interface GatewayCall {
  source: string;
  call: number;
  prompt_ids: number[];
  completion_ids: number[];
  logprobs: number[];
  finish_reason: string;
  stream: boolean;
}

async function stored(id: string): Promise<Schemas["TrajectoryRecord"]> {
  return eventually(async () => {
    try {
      const record = await client.rollout(id);
      return record.status === "live" ? undefined : record;
    } catch (error) {
      if (error instanceof GymProblemError && error.status === 404) return undefined;
      throw error;
    }
  }, `rollout ${id} stored`);
}

/** The policy's own answers to the chat calls forwarded since `from`: prompt ids, token ids, logprobs, read
 * from a whole answer or from the chunks of a streamed one (prompt ids on the first, as vLLM streams). */
function policyAnswers(from: number): { stream: boolean; prompt: number[]; tokens: number[]; logprobs: number[] }[] {
  return proxy.calls
    .slice(from)
    .filter((call) => call.path.endsWith("/chat/completions"))
    .map((call) => {
      assert.equal(call.status, 200, call.response);
      if (call.request.stream !== true) {
        const answer = JSON.parse(call.response);
        const choice = answer.choices[0];
        const logprobs = choice.logprobs.content.map((item: { logprob: number }) => item.logprob);
        return { stream: false, prompt: answer.prompt_token_ids, tokens: choice.token_ids, logprobs };
      }
      const chunks = call.response
        .split("\n")
        .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
        .map((line) => JSON.parse(line.slice(6)));
      const choices = chunks.flatMap((chunk) => chunk.choices.filter((choice: { index: number }) => choice.index === 0));
      return {
        stream: true,
        prompt: chunks[0].prompt_token_ids,
        tokens: choices.flatMap((choice) => choice.token_ids ?? []),
        logprobs: choices.flatMap((choice) => (choice.logprobs?.content ?? []).map((item: { logprob: number }) => item.logprob)),
      };
    });
}

/** What every episode must show, whatever the model did. */
async function assertTokenExactAndReplayable(
  result: EpisodeResult,
  from: number,
  opened: { task?: Record<string, unknown>; task_id?: string; seed: number },
): Promise<Schemas["TrajectoryRecord"]> {
  const record = await stored(result.sessionId);
  assert.equal(record.reward, result.reward);

  // 1. Each stored call is the policy's answer, token for token, and every forwarded call is stored.
  const calls = (record.turns ?? [])
    .filter((turn) => turn.source === "gateway")
    .map((turn) => turn as unknown as GatewayCall)
    .sort((a, b) => a.call - b.call);
  const answers = policyAnswers(from);
  assert.ok(calls.length >= 1, "the agent's model calls went through the gateway");
  assert.equal(calls.length, answers.length);
  calls.forEach((call, i) => {
    assert.equal(call.stream, answers[i]!.stream, `call ${i}: streamed`);
    assert.ok(call.completion_ids.length > 0, `call ${i}: no completion ids`);
    assert.deepEqual(call.prompt_ids, answers[i]!.prompt, `call ${i}: prompt ids`);
    assert.deepEqual(call.completion_ids, answers[i]!.tokens, `call ${i}: completion ids`);
    assert.deepEqual(call.logprobs, answers[i]!.logprobs, `call ${i}: logprobs`);
  });

  // 2. The samples: every call in exactly one sample; the masked-in tokens are the calls' completions.
  const report = await client.samples(result.sessionId);
  assert.equal(report.token_exact, true);
  assert.equal(report.num_calls, calls.length);
  assert.deepEqual(report.samples.flatMap((sample) => sample.calls), calls.map((_, i) => i));
  for (const sample of report.samples) {
    assert.equal(sample.mask.length, sample.completion_ids.length);
    const modelTokens = sample.completion_ids.filter((_, k) => sample.mask[k] === 1);
    assert.deepEqual(modelTokens, sample.calls.flatMap((i) => calls[i]!.completion_ids));
    assert.deepEqual(sample.prompt_ids, calls[sample.calls[0]!]!.prompt_ids);
  }

  // 3. A native replay: the stored assistant messages stepped on a fresh episode of the same task and seed
  //    earn the stored reward.
  const replay = await client.createSession({ env: record.env, ...opened });
  let done = false;
  for (const message of record.messages ?? []) {
    if (message.role !== "assistant" || done) continue;
    done = (await client.step(replay.session_id, { message: message as Schemas["Message"] })).done;
  }
  const rescored = await client.request("post", "/v1/sessions/{session_id}/verify", { path: { session_id: replay.session_id } });
  await client.closeSession(replay.session_id);
  assert.equal(rescored.reward, record.reward);
  return record;
}

test("plays counter with the environment's MCP tools: token-exact, and the reward replays", async (t) => {
  const from = proxy.calls.length;
  const { task, seed } = warm.tasks[0]!;
  const result = await playEpisode({ gym: gym.url, env: "counter", task, seed, run: "ts-agent", upstream: `${proxy.url}/v1`, model: MODEL, apiKey: key });
  // The warmed model calls counter's tools through the episode's MCP URL, and the tools' answer says when
  // the episode is over.
  t.diagnostic(JSON.stringify({ reward: result.reward, steps: result.steps, tools: result.toolResults }));
  assert.ok(result.toolResults.length >= 1, `no tool was called: ${result.text}`);
  assert.ok(result.steps >= 2);
  const record = await assertTokenExactAndReplayable(result, from, { task, seed });
  if (/episode is over/.test(result.toolResults.at(-1) ?? "")) {
    // The AI SDK's call after the end got the gateway's own answer: it reached no policy, and is not stored.
    const recorded = (record.turns ?? []).filter((turn) => turn.source === "gateway").length;
    assert.equal(result.steps, recorded + 1);
    assert.equal(record.done_reason, "submitted");
  }
  const toolMessages = (record.messages ?? []).filter((message) => message.role === "tool");
  assert.equal(toolMessages.length, result.toolResults.length, "each MCP call is a step of the episode");
  assert.equal(record.run, "ts-agent");
});

test("plays workplace, multi-turn, streamed (streamText) through the same two URLs: token-exact, and the reward replays", async (t) => {
  const from = proxy.calls.length;
  const tasks = await client.request("get", "/v1/environments/{env}/tasks", { path: { env: "workplace" }, query: { limit: 1 } });
  const taskId = String(tasks.tasks[0]!.id);
  const result = await playEpisode({ gym: gym.url, env: "workplace", task_id: taskId, seed: 0, upstream: `${proxy.url}/v1`, model: MODEL, stream: true, apiKey: key });
  t.diagnostic(JSON.stringify({ reward: result.reward, steps: result.steps, tools: result.toolResults, text: result.text }));
  const record = await assertTokenExactAndReplayable(result, from, { task_id: taskId, seed: 0 });
  assert.equal(record.env, "workplace");
  assert.equal(record.task_id, taskId);
});
