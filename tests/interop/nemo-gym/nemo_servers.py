"""NeMo Gym's own servers, pointed at a gym: its `SimpleAgent` and a scripted policy, in one process.

NeMo Gym runs each server as its own process and finds the others by name in one global config dict
(`name -> kind -> implementation -> {host, port, ...}`); its `ServerClient` builds each base URL as
`http://{host}:{port}`. The gym serves an environment as a resources server under a prefix
(`/v1/environments/{env}/nemo-gym`), so `PrefixedServerClient` adds the config's `url_prefix` to that
base URL, and, on a gym that requires keys, the gym's key as a header to that server's requests: what
differs from NeMo Gym's client; every request, cookie and retry is theirs.

Run as a script (`python nemo_servers.py GYM_URL ENV AGENT_PORT POLICY_PORT`, the gym's key in
`GYM_API_KEY` if it requires one) it serves, on loopback:
- the real `responses_api_agents.simple_agent` agent of nemo-gym 0.4.0 (`/run`, `/v1/responses`), whose
  resources server is the gym's environment and whose model server is
- a scripted policy speaking the OpenAI Responses API (`/v1/responses`) as NeMo Gym's model servers do:
  it first calls a tool that does not exist and passes bad arguments (to see the gym's errors reach the
  model as tool outputs), then plays the counter to its target and submits. No model hub is reachable
  here, and the agent's loop is what is under test, not a model's skill.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from typing import Any

import uvicorn
from aiohttp import ClientResponse
from fastapi import FastAPI, Request
from nemo_gym.config_types import BaseServerConfig, ModelServerRef, ResourcesServerRef
from nemo_gym.openai_utils import (
    NeMoGymResponse,
    NeMoGymResponseFunctionToolCall,
    NeMoGymResponseOutputMessage,
    NeMoGymResponseOutputText,
)
from nemo_gym.server_utils import (
    GlobalAIOHTTPAsyncClientConfig,
    ServerClient,
    get_first_server_config_dict,
    set_global_aiohttp_client,
)
from omegaconf import DictConfig, OmegaConf
from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig

AGENT = "counter_simple_agent"
POLICY = "scripted_policy"
RESOURCES = "gym_resources"


class PrefixedServerClient(ServerClient):
    """NeMo Gym's `ServerClient`, with a server's `url_prefix` (if its config has one) after host:port, and
    `api_key` as `Authorization: Bearer` on every request to such a server (the gym's).

    nemo-gym 0.4.0's `ServerClient.request` passes aiohttp's per-request options (`headers=`) through,
    but its agents send only `json` and `cookies`, and its global aiohttp session has no default headers:
    a `SimpleAgent` reaches a gym that requires keys only through a client like this one. The key is a
    field, not a config entry: NeMo Gym's head server serves the global config to whoever asks."""

    api_key: str | None = None

    def _build_server_base_url(self, server_config_dict: Any) -> str:
        base = super()._build_server_base_url(server_config_dict)
        return base + str(server_config_dict.get("url_prefix", ""))

    async def request(self, server_name: str, url_path: str, method: str, **kwargs: Any) -> ClientResponse:
        server = get_first_server_config_dict(self.global_config_dict, server_name)
        if self.api_key and server.get("url_prefix"):
            kwargs["headers"] = {**(kwargs.get("headers") or {}), "Authorization": f"Bearer {self.api_key}"}
        return await super().request(server_name=server_name, url_path=url_path, method=method, **kwargs)


def global_config(gym_url: str, env: str, agent_port: int, policy_port: int) -> DictConfig:
    """The global config dict NeMo Gym's servers share: the gym's environment as the resources server."""
    host, _, port = gym_url.removeprefix("http://").partition(":")
    return OmegaConf.create(
        {
            "head_server": {"host": "127.0.0.1", "port": 1},  # unused: nothing here asks a head server
            RESOURCES: {
                "resources_servers": {
                    "gym": {
                        "host": host,
                        "port": int(port),
                        "entrypoint": "app.py",
                        "url_prefix": f"/v1/environments/{env}/nemo-gym",
                    }
                }
            },
            POLICY: {
                "responses_api_models": {
                    "scripted": {"host": "127.0.0.1", "port": policy_port, "entrypoint": "-"}
                }
            },
            AGENT: {
                "responses_api_agents": {
                    "simple_agent": {"host": "127.0.0.1", "port": agent_port, "entrypoint": "-"}
                }
            },
        }
    )


def server_client(config: DictConfig, api_key: str | None = None) -> PrefixedServerClient:
    """NeMo Gym's client over `config`, given whole (no head server is asked for it)."""
    return PrefixedServerClient(
        head_server_config=BaseServerConfig.model_validate(config["head_server"]),
        global_config_dict=config,
        api_key=api_key,
    )


def _next_action(items: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    """The scripted policy: a tool call `(name, arguments)`, or the final text."""
    target = 0
    for item in items:
        if item.get("role") == "user":
            found = re.search(r"counter to (-?\d+)", json.dumps(item.get("content")))
            target = int(found.group(1)) if found else target
    calls = [item for item in items if item.get("type") == "function_call"]
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    if not calls:
        return "subtract", {"amount": 1}  # no such tool: the gym answers 404 {"detail": ...}
    if len(calls) == 1:
        return "add", {"amount": "six"}  # bad arguments: 422 {"detail": ...}, and the episode goes on
    if calls[-1]["name"] == "submit":
        return "I brought the counter to the target and submitted."
    try:
        value = json.loads(outputs[-1]["output"])
    except (ValueError, KeyError, IndexError):
        value = None
    if not isinstance(value, int) or isinstance(value, bool):
        return "read", {}
    if value == target:
        return "submit", {}
    return "add", {"amount": max(-10, min(10, target - value))}


def policy_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request) -> dict[str, Any]:
        body = await request.json()
        items = (
            body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        )
        action = _next_action(items)
        output: list[Any]
        if isinstance(action, str):
            text = NeMoGymResponseOutputText(annotations=[], text=action)
            output = [NeMoGymResponseOutputMessage(id=f"msg_{uuid.uuid4().hex}", content=[text])]
        else:
            name, arguments = action
            output = [
                NeMoGymResponseFunctionToolCall(
                    call_id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=json.dumps(arguments)
                )
            ]
        response = NeMoGymResponse(
            id=f"resp_{uuid.uuid4().hex}",
            created_at=time.time(),
            model="scripted",
            object="response",
            output=output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=body.get("tools") or [],
        )
        return response.model_dump(mode="json")

    return app


async def serve(gym_url: str, env: str, agent_port: int, policy_port: int) -> None:
    config = global_config(gym_url, env, agent_port, policy_port)
    set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())  # in this loop, as run_webserver does
    agent = SimpleAgent(
        config=SimpleAgentConfig(
            name=AGENT,
            host="127.0.0.1",
            port=agent_port,
            entrypoint="app.py",
            resources_server=ResourcesServerRef(type="resources_servers", name=RESOURCES),
            model_server=ModelServerRef(type="responses_api_models", name=POLICY),
            max_steps=16,
        ),
        server_client=server_client(config, os.environ.get("GYM_API_KEY")),
    )
    servers = [
        uvicorn.Server(
            uvicorn.Config(agent.setup_webserver(), host="127.0.0.1", port=agent_port, log_level="warning")
        ),
        uvicorn.Server(uvicorn.Config(policy_app(), host="127.0.0.1", port=policy_port, log_level="warning")),
    ]
    await asyncio.gather(*(server.serve() for server in servers))


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
