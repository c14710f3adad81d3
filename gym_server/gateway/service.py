"""The episodes' gateways: each forwards its agent's chat calls to the operator's policy endpoint and
records every complete call on the episode (see docs/gateway.md).

The gateway holds no transcript of its own: a call's record goes into the session's trajectory (`turns`,
through `SessionManager.record_turn`), so it is stored, snapshotted and budgeted like a step's turn data.
What it keeps per episode is where to forward (the upstream's URL, model and API key, which lives only
here, in memory, and is never stored) and the count of calls. Entries of ended episodes are dropped at
the next opening once the table outgrows the live sessions.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from gym_server.core.egress import refusal
from gym_server.core.errors import EndpointNotAllowed, GymError
from gym_server.core.settings import Settings
from gym_server.gateway.errors import GatewayError
from gym_server.gateway.record import Completed, StreamAssembler, call_record, from_answer
from gym_server.gateway.samples import SampleTally
from gym_server.gateway.upstream import UpstreamClient, UpstreamError, UpstreamResponse
from gym_server.protocols.mcp.mapping import episode_over
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager
from gym_server.store.records import FailureClass
from gym_server.trainer_adapters.samplers._http import server_root

__all__ = ["NO_TOKEN_IDS", "EpisodeGateway", "Gateways", "over_answer"]

log = logging.getLogger(__name__)

ALLOW_LIST_SETTING: Final = "GYM_ROLLOUT_RUNS__POLICY_URLS"
NO_TOKEN_IDS: Final = (
    "the upstream answered without token ids (prompt_token_ids, choices[0].token_ids and logprobs), so "
    "this call cannot be a training sample: serve the policy with vLLM >= 0.10.2, which honours the "
    "`return_token_ids` request field the gateway sends (or `gym-server policy serve`); for an "
    "evaluation-only episode open it with gateway.token_exact false"
)


@dataclass(slots=True)
class EpisodeGateway:
    """Where one episode's calls go. `headers` holds the upstream's API key: memory only."""

    session_id: str
    root: str
    model: str | None
    token_exact: bool
    headers: dict[str, str] = field(repr=False)
    calls: int = 0
    tally: SampleTally = field(default_factory=SampleTally, repr=False)

    @property
    def json_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": "application/json"}

    def metadata(self) -> dict[str, Any]:
        """What the trajectory's `metadata.gateway` says about it (never the key)."""
        return {
            "upstream": self.root,
            "model": self.model,
            "token_exact": self.token_exact,
            "num_calls": self.calls,
        }


@dataclass(slots=True)
class _Upstream:
    """An upstream answer whose headers arrived with a 200: its stream is still to be read."""

    response: UpstreamResponse
    started: float  # when the gateway took the call
    sent: float  # when it sent the call upstream


class Gateways:
    """The live episodes' gateways and the one HTTP client they share."""

    def __init__(self, manager: SessionManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings
        timeouts = settings.gateway
        self.client = UpstreamClient(
            connect_timeout_s=timeouts.connect_timeout_s, read_timeout_s=timeouts.upstream_timeout_s
        )
        self._by_session: dict[str, EpisodeGateway] = {}

    def __repr__(self) -> str:
        return f"Gateways(open={len(self._by_session)})"

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- opening ----------------------------------------------------------------------------------

    def check(self, upstream: str) -> None:
        """Refuse (422, before any connection) an upstream the operator's allow-list does not hold."""
        refused = refusal(upstream, self.settings.rollout_runs.policy_urls, ALLOW_LIST_SETTING)
        if refused is not None:
            raise EndpointNotAllowed(refused.replace("policy.base_url", "gateway.upstream", 1))

    def describe(self, upstream: str, model: str | None, token_exact: bool) -> dict[str, Any]:
        """The `metadata.gateway` an episode opened with this upstream starts with."""
        return {"upstream": server_root(upstream), "model": model, "token_exact": token_exact, "num_calls": 0}

    def open(
        self, session_id: str, upstream: str, model: str | None, token_exact: bool, api_key: str | None
    ) -> EpisodeGateway:
        if len(self._by_session) > 2 * self.manager.live_count + 64:
            for key in [k for k in self._by_session if not self.manager.is_live(k)]:
                del self._by_session[key]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        gateway = EpisodeGateway(session_id, server_root(upstream), model, token_exact, headers)
        self._by_session[session_id] = gateway
        return gateway

    def _episode(self, session_id: str) -> tuple[LiveSession, EpisodeGateway]:
        try:
            session = self.manager.get(session_id)
        except GymError as exc:
            raise GatewayError.from_gym(exc) from None
        gateway = self._by_session.get(session_id)
        if gateway is None:
            raise GatewayError(
                404,
                f"session {session_id!r} was opened without a gateway (POST /v1/sessions with `gateway`)",
                "invalid_request_error",
                "gateway-not-found",
            )
        return session, gateway

    # -- calls --------------------------------------------------------------------------------------

    async def models(self, session_id: str) -> dict[str, Any]:
        """The upstream's model list, or the episode's one model when it names one."""
        _, gateway = self._episode(session_id)
        if gateway.model is not None:
            entry = {"id": gateway.model, "object": "model", "created": 0, "owned_by": "gym-server"}
            return {"object": "list", "data": [entry]}
        try:
            response = await self.client.request("GET", f"{gateway.root}/v1/models", gateway.headers)
            content = await response.read()
        except UpstreamError as exc:
            if exc.timeout:
                raise GatewayError.upstream(
                    "the upstream did not list its models in time", timeout=True
                ) from None
            raise GatewayError.upstream(
                f"the upstream {gateway.root}/v1 is unreachable: {_cause(exc)}"
            ) from None
        if response.status != 200:
            raise GatewayError.upstream(f"the upstream answered {response.status} to GET /v1/models")
        try:
            listed: dict[str, Any] = orjson.loads(content)
        except ValueError:
            raise GatewayError.upstream("the upstream's model list is not JSON") from None
        return listed

    def _prepare(
        self, session_id: str, body: dict[str, Any]
    ) -> tuple[LiveSession, EpisodeGateway, dict[str, Any]]:
        session, gateway = self._episode(session_id)
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise GatewayError.bad_request("`messages` must be a non-empty list of chat messages")
        if body.get("n") not in (None, 1):
            raise GatewayError.bad_request("the gateway records one completion per call: `n` must be 1")
        upstream = dict(body)
        if gateway.model is not None:
            upstream["model"] = gateway.model
        if gateway.token_exact:
            upstream["return_token_ids"] = True
            upstream["logprobs"] = True
        return session, gateway, upstream

    async def chat(self, session_id: str, body: dict[str, Any]) -> bytes:
        """One non-streamed chat call: the upstream's answer (its JSON bytes as they came), recorded; or
        the episode-over answer."""
        started = time.perf_counter()
        session, gateway, upstream = self._prepare(session_id, body)
        if _over(session):
            return orjson.dumps(over_answer(session, upstream.get("model")))
        sent = time.perf_counter()
        try:
            response = await self.client.request(
                "POST", f"{gateway.root}/v1/chat/completions", gateway.json_headers, orjson.dumps(upstream)
            )
            content = await response.read()
        except UpstreamError as exc:
            raise await self._failed(gateway, exc) from None
        await self._check_status(gateway, response.status, content)
        upstream_ms = (time.perf_counter() - sent) * 1000
        try:
            completed = from_answer(orjson.loads(content))
        except ValueError as exc:
            raise await self._fail(
                gateway, GatewayError.upstream(f"the upstream's answer is unusable: {exc}")
            ) from None
        await self._record(gateway, body, completed, stream=False, started=started, upstream_ms=upstream_ms)
        return content

    async def chat_stream(self, session_id: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        """One streamed chat call. Refusals (and an upstream failing before its first byte) raise here,
        before any byte is sent; the returned iterator forwards the upstream's events as they come."""
        started = time.perf_counter()
        session, gateway, upstream = self._prepare(session_id, body)
        if _over(session):
            return _over_events(over_answer(session, upstream.get("model")))
        content = orjson.dumps(upstream)
        sent = time.perf_counter()
        try:
            response = await self.client.request(
                "POST", f"{gateway.root}/v1/chat/completions", gateway.json_headers, content
            )
            if response.status != 200:
                await self._check_status(gateway, response.status, await response.read())
        except UpstreamError as exc:
            raise await self._failed(gateway, exc) from None
        return self._forward(gateway, body, _Upstream(response, started, sent))

    async def _forward(
        self, gateway: EpisodeGateway, body: dict[str, Any], upstream: _Upstream
    ) -> AsyncIterator[bytes]:
        assembler = StreamAssembler()
        failure: GatewayError | None = None
        try:
            async for chunk in upstream.response.stream():
                assembler.feed(chunk)
                yield chunk
        except UpstreamError as exc:
            failure = await self._failed(gateway, exc)
        finally:
            upstream.response.close()
        upstream_ms = (time.perf_counter() - upstream.sent) * 1000
        if failure is None and not assembler.complete:
            why = assembler.error or "the upstream's stream ended before the completion finished"
            failure = await self._fail(gateway, GatewayError.upstream(why))
        if failure is None:
            try:
                await self._record(
                    gateway,
                    body,
                    assembler.result(),
                    stream=True,
                    started=upstream.started,
                    upstream_ms=upstream_ms,
                )
            except GatewayError as exc:
                failure = exc
        if failure is not None:
            # Headers went out with a 200: the failure is an error event, which OpenAI's clients raise.
            yield b"data: " + orjson.dumps(failure.body()) + b"\n\n"

    async def _check_status(self, gateway: EpisodeGateway, status: int, content: bytes) -> None:
        if status == 200:
            return
        message = _upstream_message(content)
        if 400 <= status < 500 and status != 408:
            # The call itself was refused (a prompt over the context, an unknown model): the agent's to
            # fix; the episode goes on and nothing is recorded.
            raise GatewayError(
                status,
                f"the upstream refused the call: {message}",
                "invalid_request_error",
                "upstream_refused",
            )
        raise await self._fail(
            gateway,
            GatewayError.upstream(
                f"the upstream answered {status}: {message}",
                timeout=status in (408, 504),
            ),
        )

    async def _failed(self, gateway: EpisodeGateway, exc: UpstreamError) -> GatewayError:
        if exc.timeout:
            error = GatewayError.upstream(
                f"the upstream did not answer within {self.settings.gateway.upstream_timeout_s:g} s "
                f"(GYM_GATEWAY__UPSTREAM_TIMEOUT_S)",
                timeout=True,
            )
        else:
            error = GatewayError.upstream(
                f"the upstream {gateway.root}/v1 is unreachable or broke off: {_cause(exc)}"
            )
        return await self._fail(gateway, error)

    async def _fail(self, gateway: EpisodeGateway, error: GatewayError) -> GatewayError:
        """End the episode, stored as failed with the error's class and its message as the failure's
        detail (the row and the inspector say why, as the agent's answer does); returns the error."""
        failure = FailureClass.POLICY_TIMEOUT if error.status == 504 else FailureClass.POLICY_ERROR
        try:
            await self.manager.close(gateway.session_id, failure=failure, detail=error.message)
        except GymError as exc:  # closed meanwhile, or the store is slow: the row follows as it can
            log.warning(
                "gateway of %s: closing after an upstream failure: %s", gateway.session_id, exc.detail
            )
        return error

    async def _record(
        self,
        gateway: EpisodeGateway,
        body: dict[str, Any],
        completed: Completed,
        *,
        stream: bool,
        started: float,
        upstream_ms: float,
    ) -> None:
        if gateway.token_exact and not completed.token_exact:
            raise await self._fail(gateway, GatewayError.upstream(NO_TOKEN_IDS))
        index, gateway.calls = gateway.calls, gateway.calls + 1
        gateway_ms = max(0.0, (time.perf_counter() - started) * 1000 - upstream_ms)
        record = call_record(
            index, body, completed, stream=stream, upstream_ms=upstream_ms, gateway_ms=gateway_ms
        )
        gateway.tally.add(record["prompt_ids"], record["completion_ids"])
        metadata = {"gateway": gateway.metadata(), "samples": gateway.tally.summary()}
        try:
            await self.manager.record_turn(gateway.session_id, record, metadata)
        except GymError as exc:
            raise GatewayError.from_gym(exc) from None


def _cause(exc: UpstreamError) -> str:
    """What happened, with the system's reason when a socket error caused it ("ConnectError: connection
    refused"): the upstream client raises its own kinds from the OSError it met, which stays the context."""
    context = exc.__context__
    if isinstance(context, OSError):
        reason = os.strerror(context.errno) if context.errno else str(context)
        return f"{exc.kind}: {reason[:1].lower()}{reason[1:]}"
    return exc.kind


def _over(session: LiveSession) -> bool:
    return session.env.done or session.truncated


def over_answer(session: LiveSession, model: Any) -> dict[str, Any]:
    """The answer to a call after the episode ended: an assistant message saying so, not recorded."""
    reward = session.verified.reward if session.verified is not None else None
    return {
        "id": f"chatcmpl-gym-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model if isinstance(model, str) else "gym-server",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": episode_over(reward)},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


async def _over_events(answer: dict[str, Any]) -> AsyncIterator[bytes]:
    head = {key: answer[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message = answer["choices"][0]["message"]
    for choice in (
        {"index": 0, "delta": {"role": "assistant", "content": message["content"]}, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": "stop"},
    ):
        yield b"data: " + orjson.dumps(head | {"choices": [choice]}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _upstream_message(content: bytes) -> str:
    try:
        body = orjson.loads(content)
    except ValueError:
        return content[:200].decode(errors="replace") or "(no body)"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(error or detail or body)[:200]
