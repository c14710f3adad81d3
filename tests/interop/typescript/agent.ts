/**
 * A TypeScript agent that the gym trains unchanged: the Vercel AI SDK (`generateText` with tools) for the
 * model, the official MCP TypeScript SDK for the environment's tools. The only gym-specific lines are the
 * two URLs the episode hands out (its OpenAI-compatible `base_url`, where every model call is recorded with
 * its token ids, and its `mcp_url`) and the episode's open and end through the typed client. This file is
 * the example of docs/agents-typescript.md.
 */

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { dynamicTool, generateText, jsonSchema, stepCountIs, streamText, type ModelMessage, type ToolSet } from "ai";

import { GymClient, type Schemas } from "../../../clients/typescript/src/index.ts";

export interface EpisodeRequest {
  /** The gym's root URL. */
  gym: string;
  /** The gym's API key, when it requires keys (it authorises the episode's two URLs too). */
  apiKey?: string;
  env: string;
  task_id?: string;
  /** An inline task instead of `task_id`. */
  task?: Record<string, unknown>;
  seed?: number;
  run?: string;
  /** The policy endpoint the gym forwards the agent's model calls to (one the operator allows). */
  upstream: string;
  model: string;
  /** Most model calls the agent makes. */
  maxSteps?: number;
  maxOutputTokens?: number;
  /** Stream the model's answers (`streamText`) instead of waiting for each whole (`generateText`). */
  stream?: boolean;
}

export interface EpisodeResult {
  sessionId: string;
  reward: number;
  /** The agent's final text (what `/answer` scored when the environment's tools did not end the episode). */
  text: string;
  /** How many model calls the AI SDK made, and the text of every tool result it got back. */
  steps: number;
  toolResults: string[];
}

/** The environment's MCP tools as AI SDK tools: each call is an MCP `tools/call` on the episode's URL. */
async function episodeTools(mcp: Client): Promise<ToolSet> {
  const tools: ToolSet = {};
  for (const tool of (await mcp.listTools()).tools) {
    tools[tool.name] = dynamicTool({
      description: tool.description ?? tool.name,
      inputSchema: jsonSchema(tool.inputSchema as Parameters<typeof jsonSchema>[0]),
      execute: async (input) => {
        const result = await mcp.callTool({ name: tool.name, arguments: input as Record<string, unknown> });
        const parts = (result.content ?? []) as { type: string; text?: string }[];
        return parts.map((part) => (part.type === "text" ? part.text : JSON.stringify(part))).join("\n");
      },
    });
  }
  return tools;
}

/** The episode's opening: its system prompt (the AI SDK's `system`) and its user messages. */
function opening(session: Schemas["SessionCreated"]): { system?: string; messages: ModelMessage[] } {
  const text = (message: Record<string, unknown>) => String(message.content ?? "");
  const system = session.messages.filter((message) => message.role === "system").map(text);
  const messages: ModelMessage[] = session.messages
    .filter((message) => message.role !== "system")
    .map((message) => ({ role: "user", content: text(message) }));
  return { system: system.length ? system.join("\n") : undefined, messages };
}

/** Play one episode: open it with a gateway, let the agent run on the two URLs, end it with `/answer`. */
export async function playEpisode(request: EpisodeRequest): Promise<EpisodeResult> {
  const gym = new GymClient({ baseUrl: request.gym, apiKey: request.apiKey });
  const session = await gym.createSession({
    env: request.env,
    task_id: request.task_id,
    task: request.task,
    seed: request.seed,
    run: request.run,
    gateway: { upstream: request.upstream, model: request.model },
  });
  if (!session.gateway) throw new Error("the gym did not open a gateway for the episode");
  const auth = request.apiKey ? { Authorization: `Bearer ${request.apiKey}` } : undefined;

  // The agent proper: nothing below knows it runs in a gym but the two URLs.
  const provider = createOpenAICompatible({ name: "gym", baseURL: session.gateway.base_url, headers: auth });
  const mcp = new Client({ name: "gym-typescript-agent", version: "0.1.0" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(session.gateway.mcp_url), { requestInit: { headers: auth } }));
  const toolResults: string[] = [];
  let text: string;
  let steps: number;
  try {
    const settings = {
      model: provider.chatModel(request.model),
      ...opening(session),
      tools: await episodeTools(mcp),
      stopWhen: stepCountIs(request.maxSteps ?? 6),
      maxOutputTokens: request.maxOutputTokens ?? 48,
      seed: request.seed,
      onStepFinish: (step: { toolResults: { output: unknown }[] }) => {
        for (const part of step.toolResults) toolResults.push(String(part.output));
      },
    };
    if (request.stream) {
      const streamed = streamText({ ...settings, onError: ({ error }) => console.error(error) });
      [text, steps] = [await streamed.text, (await streamed.steps).length];
    } else {
      const whole = await generateText(settings);
      [text, steps] = [whole.text, whole.steps.length];
    }
  } finally {
    await mcp.close();
  }

  // The end: the environment's verifier scores the episode (as it stands when its tools ended it, else on
  // the agent's final text), and the episode is stored.
  const scored = await gym.answer(session.session_id, text);
  return { sessionId: session.session_id, reward: scored.reward, text, steps, toolResults };
}
