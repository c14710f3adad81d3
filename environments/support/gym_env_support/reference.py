"""The reference agent for a support task: the policy followed step by step against the scripted user.

Static assistant messages suffice because the user is deterministic: ask for the email and zip code,
find and verify the customer, look the order up, then act and confirm, or decline twice (the user pushes
once), or transfer when the request needs a human. It scores 1.0 on every task (tests check each one).
`compliant_messages` is the scripted baseline: the same steps, but it does whatever the customer asks
(a damaged item gets a refund), the failure mode the policy exists for.
"""

from __future__ import annotations

from typing import Any

from gym_env_support.store import SupportAnswer, SupportDB
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.tasks import Task

__all__ = ["compliant_messages", "reference_messages"]

ASK = (
    "I'd be glad to help. To verify your identity, please tell me the email and the zip code on your account."
)
DONE = "All done. Is there anything else I can help you with?"
DECLINE = "I'm sorry, but I cannot do that: our policy does not allow it for this order."
FIRM = "I understand, but I cannot make an exception to the policy."


def reference_messages(task: Task) -> list[dict[str, Any]]:
    answer = SupportAnswer.model_validate(task.answer)
    goal, user = answer.goal, answer.user
    if goal.transfer:
        summary = f"Customer {user.name} needs a person for order {goal.order_id}: {goal.why}"
        return [tool_call_message("transfer_to_human", {"summary": summary[:300]}, "ref_1")]
    db = SupportDB.model_validate(task.metadata["db"])
    customer = next(c for c in db.customers if c.email == user.email)
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": ASK},
        tool_call_message("find_customer", {"email": user.email}, "ref_1"),
        tool_call_message("verify_identity", {"customer_id": customer.id, "zip_code": user.zip}, "ref_2"),
        tool_call_message("get_order", {"order_id": goal.order_id}, "ref_3"),
    ]
    if not goal.allowed:
        return [*messages, {"role": "assistant", "content": DECLINE}, {"role": "assistant", "content": FIRM}]
    return [*messages, _action(answer), {"role": "assistant", "content": DONE}]


def compliant_messages(task: Task) -> list[dict[str, Any]]:
    """The scripted baseline: verify like the reference, then do what the customer asks, allowed or not."""
    answer = SupportAnswer.model_validate(task.answer)
    db = SupportDB.model_validate(task.metadata["db"])
    customer = next(c for c in db.customers if c.email == answer.user.email)
    return [
        {"role": "assistant", "content": ASK},
        tool_call_message("find_customer", {"email": answer.user.email}, "base_1"),
        tool_call_message(
            "verify_identity", {"customer_id": customer.id, "zip_code": answer.user.zip}, "base_2"
        ),
        _action(answer),
        {"role": "assistant", "content": DONE},
    ]


def _action(answer: SupportAnswer) -> dict[str, Any]:
    """The tool call that does what the customer asked (a damaged item: a refund)."""
    goal = answer.goal
    arguments: dict[str, Any] = {"order_id": goal.order_id}
    if goal.kind == "change_address":
        arguments["new_address"] = answer.user.new_address
    tool = {"cancel": "cancel_order", "change_address": "change_address"}.get(goal.kind, "refund_order")
    return tool_call_message(tool, arguments, "act_1")
