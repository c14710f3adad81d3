"""Sandbox egress by allow-list: the policy, the gym-side proxy, and how a sandbox is wired to it.

Not to be confused with `gym_server.core.egress`, the operator's allow-list of policy endpoints the *server*
calls for rollout runs. The design is in sandbox/README.md at the repository root.
"""

from gym_server.core.egress_policy import Decision, EgressPolicy, EgressRule, parse_rule
from gym_server.sandbox.egress.declared import sandbox_policy
from gym_server.sandbox.egress.proxy import EgressProxy

__all__ = ["Decision", "EgressPolicy", "EgressProxy", "EgressRule", "parse_rule", "sandbox_policy"]
