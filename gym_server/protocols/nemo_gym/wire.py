"""NeMo Gym's resources-server wire format, as plain data: what its agents send and what they expect.

Nothing here imports `nemo_gym` (the service speaks the format; it does not depend on the package) or
touches a session: these functions turn bodies into gym calls and gym results into bodies, so the rules
of the facade are tested without a server. The shapes are those of `nemo-gym` 0.4.0
(`nemo_gym.base_resources_server`): `/seed_session` takes the agent's run request (the dataset row:
`responses_create_params` plus the row's own fields) and answers a JSON object; a tool route takes the
tool's arguments as its body and answers what the model reads; `/verify` takes
`{responses_create_params, response, ...}` and answers the same object plus `reward`. Errors are
FastAPI's `{"detail": ...}` at an HTTP status, as every NeMo Gym server answers them.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gym_server.core import jsontext
from gym_server.core.errors import InvalidRequest
from gym_server.sdk.environment import VerifyResult

__all__ = [
    "COOKIE",
    "FAILURE_KEY",
    "RESERVED_ROUTES",
    "AggregateRequest",
    "SeedParams",
    "assistant_tool_call",
    "cookie_header",
    "error_body",
    "final_answer",
    "is_tool_error",
    "parse_aggregate",
    "parse_object",
    "parse_seed",
    "session_from_cookie",
    "tool_output",
    "verify_body",
]

# The cookie that carries the episode between an agent's calls. NeMo Gym's agents keep whatever cookies
# the resources server's last answer set and send them with the next call, so every answer on a live
# episode sets it again. Its value is the gym session id itself: nothing maps one to the other, so no
# table can outlive the gym's session (TTL, reaper, close).
COOKIE: Final = "gym_server_nemo_gym"

# The verify answer's failure class in newer NeMo Gym (0.5+: `judge_failsafe` sets `judge_failed`).
FAILURE_KEY: Final = "_ng_failure_class"

# The routes of a resources server that are not tools (NeMo Gym reserves the same names for tools).
RESERVED_ROUTES: Final = frozenset({"seed_session", "verify", "aggregate_metrics"})

# Every failed tool call the gym's engine answers (bad JSON, invalid arguments, a tool that raised or
# timed out) is a tool message opening with this.
_TOOL_ERROR_PREFIX: Final = "Error:"


class SeedParams(BaseModel):
    """The fields of a `/seed_session` body that choose the episode; the rest of the row is ignored.

    They mirror `POST /v1/sessions`: `task_id` names a task; without it a task is drawn from `split` by
    `seed` (no seed: a random one). A NeMo Gym dataset row carries them beside its
    `responses_create_params`, and the agent forwards the whole row to `/seed_session`.
    """

    model_config = ConfigDict(extra="ignore")

    task_id: str | None = Field(None, max_length=256)
    seed: int | None = Field(None, ge=0, lt=2**63)
    split: str | None = Field(None, max_length=128)
    run: str | None = Field(None, max_length=256)
    ttl_s: float | None = Field(None, gt=0)


def parse_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object (an empty body reads as `{}`).

    Raises:
        InvalidRequest: not JSON, or JSON that is not an object (422).
    """
    if not raw.strip():
        return {}
    try:
        body = jsontext.loads_strict(raw)  # what the gym cannot store as sent is refused here too
    except ValueError as exc:  # not JSON, not UTF-8, or a value the gym cannot store
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object, got {type(body).__name__}")
    return body


class AggregateRequest(BaseModel):
    """NeMo Gym's `AggregateMetricsRequest`: the verify answers of finished rollouts (other fields are
    ignored, as its pydantic model ignores them)."""

    verify_responses: list[dict[str, Any]]


def parse_aggregate(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The verify answers of an `/aggregate_metrics` body.

    Raises:
        InvalidRequest: no `verify_responses`, or one that is not a list of objects (422).
    """
    try:
        return AggregateRequest.model_validate(body).verify_responses
    except ValidationError as exc:
        raise InvalidRequest(f"bad /aggregate_metrics body ({_problems(exc)})") from None


def parse_seed(body: dict[str, Any]) -> SeedParams:
    """The episode's parameters from a `/seed_session` body.

    Raises:
        InvalidRequest: a choosing field of the wrong type or range (422).
    """
    try:
        return SeedParams.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequest(f"bad /seed_session body ({_problems(exc)})") from None


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
    )


def session_from_cookie(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The gym session id in the request's `Cookie` headers, or None."""
    for name, value in headers:
        if name != b"cookie":
            continue
        for pair in value.decode("latin-1").split(";"):
            key, _, cookie_value = pair.strip().partition("=")
            if key == COOKIE and cookie_value:
                return cookie_value.strip('"')
    return None


def cookie_header(session_id: str, max_age_s: float) -> tuple[bytes, bytes]:
    """The `Set-Cookie` that carries `session_id` for the episode's idle TTL, on every path of the server
    (NeMo Gym's clients address the resources server at its root, the gym mounts it under a prefix)."""
    value = f"{COOKIE}={session_id}; Max-Age={max(1, int(max_age_s))}; Path=/; HttpOnly; SameSite=lax"
    return b"set-cookie", value.encode("latin-1")


def assistant_tool_call(name: str, arguments: bytes) -> dict[str, Any]:
    """The assistant message one tool route call stands for, in the native step's OpenAI form.

    The body travels verbatim as the call's JSON arguments, so the engine judges it exactly as it judges
    a native call's arguments (a body that is not an object becomes the same error tool message).
    """
    text = arguments.decode("utf-8", errors="replace").strip() or "{}"
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": text}}],
    }


def is_tool_error(content: str) -> bool:
    """Whether a tool message reports a failed call (answered 422 in NeMo Gym's error form)."""
    return content.startswith(_TOOL_ERROR_PREFIX)


def tool_output(content: str) -> bytes:
    """A tool message's content as a tool route's JSON body: as is when it is JSON (what the gym's tools
    return: numbers, objects), else as a JSON string, so the model reads what a native client shows it."""
    try:
        orjson.loads(content)
    except orjson.JSONDecodeError:
        return jsontext.dumps(content)
    return content.encode()


def final_answer(response: Any) -> str | None:
    """The text of the last assistant message in a NeMo Gym (OpenAI Responses) `response`'s `output`,
    when that message is the output's last item: the final answer the agent did not send to any tool
    route, which an environment that ends on a plain answer (e.g. `math`) must read before it is scored.
    """
    if not isinstance(response, dict):
        return None
    output = response.get("output")
    if not isinstance(output, list) or not output or not isinstance(output[-1], dict):
        return None
    last = output[-1]
    if last.get("type") != "message" or last.get("role") != "assistant":
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [part.get("text") for part in content if isinstance(part, dict)]
    texts = [text for text in parts if isinstance(text, str)]
    return "".join(texts) if texts else None


def verify_body(request: dict[str, Any], result: VerifyResult, session_id: str) -> bytes:
    """`/verify`'s answer: the request's fields plus `reward`, as `BaseVerifyResponse` extends
    `BaseVerifyRequest`; the verifier's components as `reward_components` (the newer protocol's
    multi-reward field), the failure class if any, and where to find the stored trajectory."""
    answer = {
        **request,
        "reward": result.reward,
        "reward_components": dict(result.components),
        "gym_session_id": session_id,
        "gym_failure": result.failure,
        "gym_verify_info": dict(result.info),
    }
    if result.failure is not None:
        # Where newer NeMo Gym (0.5+) marks a score not to train on (e.g. `judge_failed`).
        answer[FAILURE_KEY] = result.failure
    return jsontext.dumps(answer, default=str)


def error_body(detail: str) -> bytes:
    """NeMo Gym's (FastAPI's) error form."""
    return jsontext.dumps({"detail": detail})
