"""From what an environment declares and what the operator allows to the policy a sandbox gets."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gym_server.core.egress_policy import EgressPolicy, parse_rule
from gym_server.core.settings import EgressSettings

__all__ = ["sandbox_policy"]

log = logging.getLogger(__name__)


def sandbox_policy(entries: Sequence[str], settings: EgressSettings) -> EgressPolicy | None:
    """The policy for a sandbox whose environment declared `entries`; None means no egress at all.

    Egress switched off, no entries, or none left under the operator's ceiling: None (offline).

    Raises:
        ValueError: an entry is not `host:port` (an environment definition error, named in the message).
    """
    rules = [parse_rule(entry) for entry in entries]
    if not rules:
        return None
    if not settings.enabled:
        log.warning(
            "sandbox egress is switched off (GYM_SANDBOX__EGRESS__ENABLED): %s dropped", list(entries)
        )
        return None
    if settings.allowed is not None:
        ceiling = {parse_rule(entry) for entry in settings.allowed}
        dropped = [str(rule) for rule in rules if rule not in ceiling]
        if dropped:
            log.warning("sandbox egress entries not in GYM_SANDBOX__EGRESS__ALLOWED are dropped: %s", dropped)
        rules = [rule for rule in rules if rule in ceiling]
    if not rules:
        return None
    return EgressPolicy(
        rules, max_connections=settings.max_connections, connect_timeout_s=settings.connect_timeout_s
    )
