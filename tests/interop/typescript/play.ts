/**
 * Play one episode with the agent of agent.ts and print its reward and token-exact samples:
 *
 *   npx tsx play.ts --gym http://127.0.0.1:8000 --upstream http://127.0.0.1:8001/v1 --model tiny \
 *       --env counter --task-id counter-0000 --seed 0
 *
 * `GYM_API_KEY` is sent when set (a gym that requires keys).
 */

import { parseArgs } from "node:util";

import { GymClient } from "../../../clients/typescript/src/index.ts";
import { playEpisode } from "./agent.ts";

const { values } = parseArgs({
  options: {
    gym: { type: "string", default: "http://127.0.0.1:8000" },
    upstream: { type: "string", default: "http://127.0.0.1:8001/v1" },
    model: { type: "string", default: "tiny" },
    env: { type: "string", default: "counter" },
    "task-id": { type: "string" },
    seed: { type: "string", default: "0" },
    "max-steps": { type: "string", default: "6" },
  },
});

const apiKey = process.env.GYM_API_KEY;
const result = await playEpisode({
  gym: values.gym,
  apiKey,
  env: values.env,
  task_id: values["task-id"],
  seed: Number(values.seed),
  upstream: values.upstream,
  model: values.model,
  maxSteps: Number(values["max-steps"]),
});
const report = await new GymClient({ baseUrl: values.gym, apiKey }).samples(result.sessionId);
console.log(
  JSON.stringify(
    {
      session: result.sessionId,
      reward: result.reward,
      model_calls: result.steps,
      tool_results: result.toolResults,
      token_exact: report.token_exact,
      samples: report.samples.map((sample) => ({ calls: sample.calls, prompt: sample.prompt_ids.length, completion: sample.completion_ids.length })),
      masked_share: report.masked_share,
    },
    null,
    2,
  ),
);
