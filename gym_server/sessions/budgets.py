"""An episode's budgets: its turns and the bytes of its transcript (turn data included).

Crossing one ends the episode for steps with a failure class (`max_turns`, `max_transcript_bytes`),
never with an error: the step that crossed it is answered, and the episode is verified and stored as
any other. Plain functions on the session, called with the server's limit, so the step path pays no
more than a function call.
"""

from __future__ import annotations

from typing import Any

from gym_server.core import jsontext
from gym_server.sessions.live import LiveSession
from gym_server.store.records import FailureClass

__all__ = ["apply_budgets", "charge_bytes"]


def apply_budgets(
    session: LiveSession,
    message: dict[str, Any],
    replies: list[dict[str, Any]],
    turn_data: dict[str, Any] | None,
    max_transcript_bytes: int,
) -> None:
    """Charge one step (its message, the environment's replies, its turn data) and count its turn."""
    # Turn data is stored with the trajectory and held in memory until close, so it counts too:
    # otherwise a client could park megabytes per step on a session outside every budget.
    size = len(jsontext.dumps(message)) + len(jsontext.dumps(replies))
    if turn_data:
        size += len(jsontext.dumps(turn_data))
    charge_bytes(session, size, max_transcript_bytes)
    if not session.env.done and session.env.turns >= session.max_turns:
        session.failure = FailureClass.MAX_TURNS
        session.env.finish("max_turns")


def charge_bytes(session: LiveSession, size: int, max_transcript_bytes: int) -> None:
    """Add `size` bytes to the transcript; past `max_transcript_bytes` the episode ends."""
    session.transcript_bytes += size
    if not session.env.done and session.transcript_bytes > max_transcript_bytes:
        session.failure = FailureClass.MAX_TRANSCRIPT_BYTES
        session.env.finish("max_transcript_bytes")
