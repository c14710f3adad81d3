/**
 * A typed client for the gym-server HTTP API.
 *
 * Every type comes from `schema.ts`, which openapi-typescript generates from the gym's own OpenAPI document
 * (`openapi.json`, dumped from the app): a route or schema that changes on the server changes these types,
 * and the repository's drift check fails until they are regenerated (`npm run generate`). The client has no
 * runtime dependency: Node's (or the browser's) `fetch` does the HTTP.
 *
 * Errors: every non-2xx answer becomes a `GymProblemError` carrying the server's RFC 9457 problem+json
 * body (`type`, `title`, `status`, `detail` and any extension members), so callers branch on `status` or
 * `problem.type` instead of parsing text.
 */

import type { components, paths } from "./schema.js";

export type { components, paths } from "./schema.js";

/** The gym's named schemas (`SessionCreated`, `StepResponse`, `TrajectoryRecord`, ...). */
export type Schemas = components["schemas"];

type Method = "get" | "post" | "delete";

/** The routes that define `method`. */
export type PathsWith<M extends Method> = {
  [P in keyof paths]: paths[P] extends Record<M, object> ? P : never;
}[keyof paths];

type Operation<P extends keyof paths, M extends Method> = paths[P][M];

type JsonOf<C> = C extends { content: { "application/json": infer T } } ? T : undefined;

/** The body of the operation's success answer (200, 201 or 202; `undefined` for 204). */
export type SuccessBody<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { responses: infer R }
    ? R extends { 200: infer C }
      ? JsonOf<C>
      : R extends { 201: infer C }
        ? JsonOf<C>
        : R extends { 202: infer C }
          ? JsonOf<C>
          : undefined
    : never;

type JsonBody<R> = R extends { content: { "application/json": infer B } } ? B : never;

/** The JSON body the operation takes (required or optional), `never` when it takes none. */
export type RequestBody<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { requestBody: infer R }
    ? JsonBody<R>
    : Operation<P, M> extends { requestBody?: infer R }
      ? JsonBody<NonNullable<R>>
      : never;

type PathParams<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { parameters: { path: infer Q } } ? Q : never;

type QueryParams<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer Q } } ? Q : never;

/** What a request takes besides its method and route: path and query parameters, a JSON body. */
export type RequestOptions<P extends keyof paths, M extends Method> = ([PathParams<P, M>] extends [never]
  ? { path?: undefined }
  : { path: PathParams<P, M> }) &
  ([QueryParams<P, M>] extends [never] ? { query?: undefined } : { query?: QueryParams<P, M> }) &
  ([RequestBody<P, M>] extends [never]
    ? { body?: undefined }
    : Operation<P, M> extends { requestBody: unknown }
      ? { body: RequestBody<P, M> }
      : { body?: RequestBody<P, M> });

/** An RFC 9457 problem as the gym sends it; extension members (e.g. `errors`, `retry_after_s`) ride along. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  [extension: string]: unknown;
}

/** A non-2xx answer from the gym. `problem` is the problem+json body (synthesised when the body is not one). */
export class GymProblemError extends Error {
  readonly status: number;
  readonly problem: Problem;

  constructor(problem: Problem) {
    super(`${problem.status} ${problem.title}: ${problem.detail}`);
    this.name = "GymProblemError";
    this.status = problem.status;
    this.problem = problem;
  }

  /** The problem's short name: `urn:gym-server:problem:session-not-found` gives `session-not-found`. */
  get slug(): string {
    return this.problem.type.split(":").at(-1) ?? this.problem.type;
  }
}

export interface GymClientOptions {
  /** The gym's root URL, e.g. `http://127.0.0.1:8000` (no `/v1`). */
  baseUrl: string;
  /** An API key, sent as `Authorization: Bearer <key>` (needed when the gym requires keys). */
  apiKey?: string;
  /** A `fetch` of the caller's own (a proxy, a test double); default the global one. */
  fetch?: typeof fetch;
}

/** The gym's API: `request` reaches every route of the OpenAPI document; the methods name the common ones. */
export class GymClient {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: GymClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** One call to any route of the document, typed by it: `request("get", "/v1/rollouts/{rollout_id}", {path: {rollout_id}})`. */
  async request<M extends Method, P extends PathsWith<M>>(
    method: M,
    route: P,
    options: RequestOptions<P, M>,
  ): Promise<SuccessBody<P, M>> {
    const url = new URL(this.baseUrl + fillPath(route, options.path as Record<string, unknown> | undefined));
    for (const [key, value] of Object.entries((options.query ?? {}) as Record<string, unknown>)) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    const headers: Record<string, string> = { accept: "application/json, application/problem+json" };
    if (this.#apiKey) headers.authorization = `Bearer ${this.#apiKey}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const response = await this.#fetch(url, { method: method.toUpperCase(), headers, body });
    const text = await response.text();
    if (!response.ok) throw new GymProblemError(toProblem(response, text));
    return (text ? JSON.parse(text) : undefined) as SuccessBody<P, M>;
  }

  /** The environments this gym serves. */
  environments(): Promise<Schemas["EnvironmentList"]> {
    return this.request("get", "/v1/environments", {});
  }

  /** Open an episode. */
  createSession(body: Schemas["CreateSessionRequest"]): Promise<Schemas["SessionCreated"]> {
    return this.request("post", "/v1/sessions", { body });
  }

  /** Send the assistant's message; the environment's answer, `done` and (at the end) `reward` come back. */
  step(
    sessionId: string,
    body: RequestBody<"/v1/sessions/{session_id}/step", "post">,
  ): Promise<Schemas["StepResponse"]> {
    return this.request("post", "/v1/sessions/{session_id}/step", { path: { session_id: sessionId }, body });
  }

  /**
   * Fork the episode (live or stored) at `turn`: `n` new live sessions in the state it had after that turn,
   * each holding its messages up to there and ready for the next assistant turn (docs/fork.md). All of them
   * or none: a 409 `fork-diverged` names the first observation a replay did not reproduce.
   */
  fork(sessionId: string, body: Schemas["ForkRequest"]): Promise<Schemas["ForkCreated"]> {
    return this.request("post", "/v1/sessions/{session_id}/fork", { path: { session_id: sessionId }, body });
  }

  /** The live episode's state. */
  session(sessionId: string): Promise<Schemas["SessionState"]> {
    return this.request("get", "/v1/sessions/{session_id}", { path: { session_id: sessionId } });
  }

  /** Close the episode (stored as abandoned unless it was done). */
  async closeSession(sessionId: string): Promise<void> {
    await this.request("delete", "/v1/sessions/{session_id}", { path: { session_id: sessionId } });
  }

  /**
   * End an episode whose agent used its own tools: the environment's verifier scores `answer` (omitted: the
   * last assistant message the episode's gateway recorded), and the episode is closed and stored.
   */
  answer(sessionId: string, answer?: string): Promise<Schemas["EpisodeAnswered"]> {
    return this.request("post", "/v1/sessions/{session_id}/answer", {
      path: { session_id: sessionId },
      body: { answer: answer ?? null },
    });
  }

  /** A stored episode's token-exact training samples, from the calls its gateway recorded. */
  samples(rolloutId: string): Promise<Schemas["SamplesReport"]> {
    return this.request("get", "/v1/rollouts/{rollout_id}/samples", { path: { rollout_id: rolloutId } });
  }

  /** A stored trajectory. */
  rollout(rolloutId: string): Promise<Schemas["TrajectoryRecord"]> {
    return this.request("get", "/v1/rollouts/{rollout_id}", { path: { rollout_id: rolloutId } });
  }
}

function fillPath(route: string, params: Record<string, unknown> | undefined): string {
  return route.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = params?.[name];
    if (value === undefined || value === null) throw new TypeError(`route ${route} needs path parameter '${name}'`);
    return encodeURIComponent(String(value));
  });
}

function toProblem(response: Response, text: string): Problem {
  try {
    const body: unknown = JSON.parse(text);
    if (isProblem(body)) return body;
  } catch {
    // not JSON: a proxy's page, say; described below
  }
  return {
    type: "about:blank",
    title: response.statusText || "HTTP error",
    status: response.status,
    detail: text.slice(0, 500),
  };
}

function isProblem(body: unknown): body is Problem {
  if (typeof body !== "object" || body === null) return false;
  const candidate = body as Record<string, unknown>;
  return typeof candidate.type === "string" && typeof candidate.status === "number" && typeof candidate.title === "string";
}
