/**
 * Compiled, never run: `npm run typecheck` (tsc) fails when the generated client stops refusing what the
 * OpenAPI document forbids. Each `@ts-expect-error` line must be a type error, and the others must not be.
 */

import { GymClient } from "../../../clients/typescript/src/index.ts";

export function typedRoutes(client: GymClient): void {
  // @ts-expect-error creating a session needs its body
  void client.request("post", "/v1/sessions", {});
  // @ts-expect-error a path parameter is required
  void client.request("get", "/v1/rollouts/{rollout_id}", {});
  // @ts-expect-error a GET takes no body
  void client.request("get", "/v1/environments", { body: 1 });
  // @ts-expect-error the environment is a string
  void client.createSession({ env: 3 });
  // @ts-expect-error not a route of the document
  void client.request("get", "/v1/no-such-route", {});
  // /answer's body is optional; the others are the document's shapes.
  void client.request("post", "/v1/sessions/{session_id}/answer", { path: { session_id: "s" } });
  void client.request("get", "/v1/environments/{env}/tasks", { path: { env: "counter" }, query: { limit: 5 } });
  void client.createSession({ env: "counter", gateway: { upstream: "http://127.0.0.1:8001/v1" } });
}
