"""The episodes' gateways: each forwards its agent's chat calls to the operator's policy endpoint and
records every complete call on the episode (see docs/gateway.md).

The gateway holds no transcript of its own: a call's record goes into the session's trajectory (`turns`,
through `SessionManager.record_turn`), so it is stored, snapshotted and budgeted like a step's turn data.
What it keeps per episode is where to forward (the upstream's URL, model and API key, which lives only
here, in memory, and is never stored), the count of calls and the samples' tally (the current sample's
token ids). It is keyed by the live session weakly, so it goes when the episode closes, however it
closes (the tally of closed episodes outlived them by thousands before, issue 37).

What an upstream can make the gym hold is bounded by the episode's remaining transcript budget: a whole
answer is read up to it (refused on its Content-Length before any of it is read), a stream's events and
assembled completion likewise (`StreamAssembler`), and the record is charged before it is kept. Past
it the call is refused (413 `max_transcript_bytes`; a stream's last event says so), nothing is
recorded and the episode ends, stored failed with failure `max_transcript_bytes`. Each call has a
deadline (`gateway.call_deadline_s`) besides the read timeout. The upstream's API key is redacted from
what the gateway relays of the upstream's answers and error texts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import orjson

from gym_server.core.egress import EndpointRefused, admit
from gym_server.core.errors import EndpointNotAllowed, GymError, SessionFinished
from gym_server.core.settings import Settings
from gym_server.gateway.errors import GatewayError
from gym_server.gateway.record import Completed, StreamAssembler, call_record, events_end, from_answer
from gym_server.gateway.samples import SampleTally
from gym_server.gateway.upstream import (
    Target,
    UpstreamClient,
    UpstreamError,
    UpstreamResponse,
    UpstreamTooLarge,
)
from gym_server.protocols.mcp.mapping import episode_over
from gym_server.sessions.live import LiveSession
from gym_server.sessions.manager import SessionManager
from gym_server.sessions.policy_runs import PolicyRuns
from gym_server.store.records import FailureClass

__all__ = ["NO_TOKEN_IDS", "EpisodeGateway", "Gateways", "over_answer"]

log = logging.getLogger(__name__)

ALLOW_LIST_SETTING: Final = "GYM_ROLLOUT_RUNS__POLICY_URLS"
NO_TOKEN_IDS: Final = (
    "the upstream answered without token ids (prompt_token_ids, choices[0].token_ids and logprobs), so "
    "this call cannot be a training sample: serve the policy with vLLM >= 0.10.2, which honours the "
    "`return_token_ids` request field the gateway sends (or `gym-server policy serve`); for an "
    "evaluation-only episode open it with gateway.token_exact false"
)
_SMALL_BODY: Final = 1 << 20  # a model list's or an error's body: read up to this, no more
_REDACTED: Final = "[redacted]"
_MIN_SECRET: Final = 8  # a shorter key ("EMPTY", vLLM's placeholder) is no secret, and common text


@dataclass(slots=True)
class EpisodeGateway:
    """Where one episode's calls go. `headers` holds the upstream's API key: memory only."""

    session_id: str
    root: str
    target: Target
    model: str | None
    token_exact: bool
    headers: dict[str, str] = field(repr=False)
    secret: str | None = field(default=None, repr=False)  # the key, to redact from what is relayed
    calls: int = 0
    tally: SampleTally = field(default_factory=SampleTally, repr=False)
    # the policy revision the episode was opened under (`policy.weight_version`), recorded on a call
    # when its run announces no version (docs/rollout-buffer.md)
    weight_version: str | None = None

    @property
    def json_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": "application/json"}

    def redact(self, data: bytes) -> bytes:
        """`data` from the upstream without the key (a check in C when it is not there)."""
        if self.secret is None:
            return data
        secret = self.secret.encode()
        return data.replace(secret, _REDACTED.encode()) if secret in data else data

    def redact_text(self, text: str) -> str:
        return text.replace(self.secret, _REDACTED) if self.secret is not None else text

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
    allowance: int  # bytes of the transcript budget its completion may take
    version: str | None  # the policy version the call was sent under


class Gateways:
    """The live episodes' gateways and the one HTTP client they share."""

    def __init__(self, manager: SessionManager, settings: Settings, policy_runs: PolicyRuns) -> None:
        self.manager = manager
        self.settings = settings
        self.policy_runs = policy_runs
        timeouts = settings.gateway
        self.client = UpstreamClient(
            connect_timeout_s=timeouts.connect_timeout_s, read_timeout_s=timeouts.upstream_timeout_s
        )
        self._by_session: weakref.WeakKeyDictionary[LiveSession, EpisodeGateway] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"Gateways(open={len(self._by_session)})"

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- opening ----------------------------------------------------------------------------------

    def check(self, upstream: str) -> httpx.URL:
        """The upstream's server root, parsed once: what the allow-list checked is what is connected
        to. Refused (422, before any connection): a URL the operator's allow-list does not hold, or one
        that parsers could read differently (a port out of range or in other digits, dot segments)."""
        try:
            return admit(upstream, self.settings.rollout_runs.policy_urls, ALLOW_LIST_SETTING)
        except EndpointRefused as exc:
            raise EndpointNotAllowed(str(exc).replace("policy.base_url", "gateway.upstream", 1)) from None

    def describe(self, upstream: httpx.URL, model: str | None, token_exact: bool) -> dict[str, Any]:
        """The `metadata.gateway` an episode opened with this upstream starts with."""
        root = str(upstream).rstrip("/")
        return {"upstream": root, "model": model, "token_exact": token_exact, "num_calls": 0}

    def open(
        self,
        session: LiveSession,
        upstream: httpx.URL,
        model: str | None,
        token_exact: bool,
        api_key: str | None,
    ) -> EpisodeGateway:
        """The episode's gateway to `upstream` (as `check` gave it), kept as long as `session` lives."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        secret = api_key if api_key is not None and len(api_key) >= _MIN_SECRET else None
        root = str(upstream).rstrip("/")
        gateway = EpisodeGateway(session.id, root, Target.of(upstream), model, token_exact, headers, secret)
        version = (session.policy or {}).get("weight_version")
        gateway.weight_version = None if version is None else str(version)
        self._by_session[session] = gateway
        return gateway

    def inherit(self, parent: LiveSession, fork: LiveSession) -> EpisodeGateway | None:
        """Give `fork` a gateway to where `parent`'s goes (upstream, model, key; its own calls and sample
        tally), so an agent that drove the parent through its gateway drives each fork the same way;
        None when `parent` has none."""
        gateway = self._by_session.get(parent)
        if gateway is None:
            return None
        inherited = dataclasses.replace(gateway, session_id=fork.id, calls=0, tally=SampleTally())
        fork.metadata = {**fork.metadata, "gateway": inherited.metadata()}
        fork.dirty = True  # the next snapshot stores it
        self._by_session[fork] = inherited
        return inherited

    def _episode(self, session_id: str) -> tuple[LiveSession, EpisodeGateway]:
        try:
            session = self.manager.get(session_id)
        except GymError as exc:
            raise GatewayError.from_gym(exc) from None
        gateway = self._by_session.get(session)
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
        target = gateway.target.join("/v1/models")
        try:
            response = await self.client.request(
                "GET", target, gateway.headers, b"", deadline=self._deadline()
            )
            content = await response.read(_SMALL_BODY)
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

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.settings.gateway.call_deadline_s

    async def _allowance(self, session: LiveSession, gateway: EpisodeGateway, request: bytes) -> int:
        """The bytes of the transcript budget left for the call's completion, once its request (about
        the size of the messages its record repeats) is counted; none left ends the episode here."""
        left = self.settings.limits.max_transcript_bytes - session.transcript_bytes - len(request)
        if left <= 0:
            raise await self._fail(gateway, self._over_budget("the request"))
        return left

    def _over_budget(self, what: str) -> GatewayError:
        limit = self.settings.limits.max_transcript_bytes
        return GatewayError(
            413,
            f"{what} would take the episode past its transcript budget ({limit} bytes, "
            "GYM_LIMITS__MAX_TRANSCRIPT_BYTES): the call is not recorded and the episode is ended, "
            "stored as failed with failure max_transcript_bytes",
            "invalid_request_error",
            FailureClass.MAX_TRANSCRIPT_BYTES.value,
        )

    async def _send(self, gateway: EpisodeGateway, request: bytes) -> UpstreamResponse:
        """POST one chat call upstream under the call's deadline; the answer's head is read, its body not.

        Raises:
            GatewayError: the upstream answered other than 200 (its refusal, passed on).
            UpstreamError: the connection failed or the deadline passed.
        """
        response = await self.client.request(
            "POST",
            gateway.target.join("/v1/chat/completions"),
            gateway.json_headers,
            request,
            deadline=self._deadline(),
        )
        if response.status != 200:
            raise await self._refusal(gateway, response.status, await _error_body(response))
        return response

    async def chat(self, session_id: str, body: dict[str, Any]) -> bytes:
        """One non-streamed chat call: the upstream's answer (its JSON bytes as they came, the key
        redacted), recorded; or the episode-over answer."""
        started = time.perf_counter()
        session, gateway, upstream = self._prepare(session_id, body)
        if _over(session):
            return orjson.dumps(over_answer(session, upstream.get("model")))
        request = orjson.dumps(upstream)
        allowance = await self._allowance(session, gateway, request)
        version = await self._version(session, gateway)
        sent = time.perf_counter()
        try:
            response = await self._send(gateway, request)
            content = gateway.redact(await response.read(allowance))
        except UpstreamTooLarge as exc:
            raise await self._fail(gateway, self._over_budget(f"the answer ({exc.size} bytes)")) from None
        except UpstreamError as exc:
            raise await self._failed(gateway, exc) from None
        upstream_ms = (time.perf_counter() - sent) * 1000
        try:
            completed = from_answer(orjson.loads(content))
        except ValueError as exc:
            raise await self._fail(
                gateway, GatewayError.upstream(f"the upstream's answer is unusable: {exc}")
            ) from None
        await self._record(
            gateway, body, completed, stream=False, started=started, upstream_ms=upstream_ms, version=version
        )
        return content

    async def chat_stream(self, session_id: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        """One streamed chat call. Refusals (and an upstream failing before its first byte) raise here,
        before any byte is sent; the returned iterator forwards the upstream's events as they come."""
        started = time.perf_counter()
        session, gateway, upstream = self._prepare(session_id, body)
        if _over(session):
            return _over_events(over_answer(session, upstream.get("model")))
        request = orjson.dumps(upstream)
        allowance = await self._allowance(session, gateway, request)
        version = await self._version(session, gateway)
        sent = time.perf_counter()
        try:
            response = await self._send(gateway, request)
        except UpstreamError as exc:
            raise await self._failed(gateway, exc) from None
        return self._forward(gateway, body, _Upstream(response, started, sent, allowance, version))

    async def _forward(
        self, gateway: EpisodeGateway, body: dict[str, Any], upstream: _Upstream
    ) -> AsyncIterator[bytes]:
        """The upstream's events, passed on as they come while the completion is assembled; the first
        error (the upstream's own error event, a malformed chunk, the budget) stops the reading there,
        before the chunk holding it is passed on, and the agent gets the gateway's error event."""
        assembler = StreamAssembler(budget=upstream.allowance)
        failure: GatewayError | None = None
        held: list[bytes] = []  # an event not ended yet: passed on once whole, so an error event after
        try:  # it is never glued to half an event (the event's size is bounded by the assembler)
            async for chunk in upstream.response.stream():
                chunk = gateway.redact(chunk)
                assembler.feed(chunk)
                if assembler.error is not None:
                    break
                end = events_end(chunk)
                if end < 0:
                    held.append(chunk)
                    continue
                yield b"".join([*held, chunk[:end]]) if held else chunk[:end]
                held = [chunk[end:]] if end < len(chunk) else []
            else:
                if held:  # the stream's end, without a blank line after its last event
                    yield b"".join(held)
        except UpstreamError as exc:
            failure = await self._failed(gateway, exc)
        finally:
            upstream.response.close()
        upstream_ms = (time.perf_counter() - upstream.sent) * 1000
        if failure is None and assembler.over_budget:
            failure = await self._fail(gateway, self._over_budget(f"the stream: {assembler.error}"))
        elif failure is None and not assembler.complete:
            why = assembler.error or "the upstream's stream ended before the completion finished"
            failure = await self._fail(gateway, GatewayError.upstream(gateway.redact_text(why)))
        if failure is None:
            try:
                await self._record(
                    gateway,
                    body,
                    assembler.result(),
                    stream=True,
                    started=upstream.started,
                    upstream_ms=upstream_ms,
                    version=upstream.version,
                )
            except GatewayError as exc:
                failure = exc
        if failure is not None:
            # Headers went out with a 200: the failure is an error event, which OpenAI's clients raise.
            yield b"data: " + orjson.dumps(failure.body()) + b"\n\n"

    async def _refusal(self, gateway: EpisodeGateway, status: int, content: bytes) -> GatewayError:
        """The error for an answer other than 200 (the episode ends unless the call itself was refused)."""
        message = gateway.redact_text(_upstream_message(content))
        if 400 <= status < 500 and status != 408:
            # The call itself was refused (a prompt over the context, an unknown model): the agent's to
            # fix; the episode goes on and nothing is recorded.
            return GatewayError(
                status,
                f"the upstream refused the call: {message}",
                "invalid_request_error",
                "upstream_refused",
            )
        return await self._fail(
            gateway,
            GatewayError.upstream(
                f"the upstream answered {status}: {message}",
                timeout=status in (408, 504),
            ),
        )

    async def _failed(self, gateway: EpisodeGateway, exc: UpstreamError) -> GatewayError:
        if exc.kind == "Deadline":
            error = GatewayError.upstream(
                f"the upstream's answer did not complete within {self.settings.gateway.call_deadline_s:g} "
                "s (GYM_GATEWAY__CALL_DEADLINE_S)",
                timeout=True,
            )
        elif exc.timeout:
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
        """End the episode, stored as failed with the error's code as its failure class (`policy_error`,
        `policy_timeout`, `max_transcript_bytes`) and its message as the failure's detail (the row and
        the inspector say why, as the agent's answer does); returns the error to raise."""
        failure = FailureClass(error.code or FailureClass.POLICY_ERROR)
        try:
            await self.manager.close(gateway.session_id, failure=failure, detail=error.message)
        except GymError as exc:  # closed meanwhile, or the store is slow: the row follows as it can
            log.warning(
                "gateway of %s: closing after an upstream failure: %s", gateway.session_id, exc.detail
            )
        return error

    async def _version(self, session: LiveSession, gateway: EpisodeGateway) -> str | None:
        """The policy version a call sent now is sampled by: its run's announced one (the trainer
        announces a version once the policy server serves it), else the episode's own."""
        announced = await self.policy_runs.current_version(session.tenant, session.run)
        return gateway.weight_version if announced is None else str(announced)

    async def _record(
        self,
        gateway: EpisodeGateway,
        body: dict[str, Any],
        completed: Completed,
        *,
        stream: bool,
        started: float,
        upstream_ms: float,
        version: str | None,
    ) -> None:
        if gateway.token_exact and not completed.token_exact:
            raise await self._fail(gateway, GatewayError.upstream(NO_TOKEN_IDS))
        index, gateway.calls = gateway.calls, gateway.calls + 1
        gateway_ms = max(0.0, (time.perf_counter() - started) * 1000 - upstream_ms)
        record = call_record(
            index,
            body,
            completed,
            stream=stream,
            upstream_ms=upstream_ms,
            gateway_ms=gateway_ms,
            weight_version=version,
        )
        gateway.tally.add(record["prompt_ids"], record["completion_ids"])
        metadata = {"gateway": gateway.metadata(), "samples": gateway.tally.summary()}
        try:
            await self.manager.record_turn(gateway.session_id, record, metadata)
        except SessionFinished:  # the record would cross the transcript budget: not kept
            raise await self._fail(gateway, self._over_budget("the call's record")) from None
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


async def _error_body(response: UpstreamResponse) -> bytes:
    """The body of an upstream's refusal, for its message; one too large to be a message is not read."""
    try:
        return await response.read(_SMALL_BODY)
    except UpstreamTooLarge:
        return b""


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
