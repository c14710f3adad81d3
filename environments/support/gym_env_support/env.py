"""The `support` environment: a customer-support agent bound by a written policy, with a simulated user.

Multi-turn, τ-bench-like. The system prompt is the desk's policy (`store.POLICY`); the first user
message is the customer's request. The agent works through tools on the episode's database and talks to
the customer with plain messages, which the scripted user (`user.py`) answers; the episode ends when the
user leaves, on `transfer_to_human`, or at the turn limit. Actions are carried out even when the policy
forbids them (as a real back office would), and each such action is recorded as a violation.

Reward 1.0 when the final orders equal the gold state (the request done if the policy allows it, nothing
else changed; a transfer when the request needs a human), no policy rule was broken, and a declined
request was declined on the facts (the customer verified and the order looked up: otherwise doing nothing
at all would pay on every request the policy refuses); else 0.0. Components: `db_match`, `violations`
(how many), `verified` (identity verified at some point), `checked` (the requested order looked up by
`get_order` or `list_orders`), `transferred`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from gym_env_support import store as store_module
from gym_env_support import user as user_module
from gym_env_support.store import (
    POLICY,
    Desk,
    Order,
    SupportAnswer,
    SupportDB,
    policy_problem,
)
from gym_env_support.user import SimulatedUser
from gym_server.sdk.environment import Environment, ForkMode, VerifyResult
from gym_server.sdk.messages import tool_call_message
from gym_server.sdk.probes import HackProbe
from gym_server.sdk.registry import content_hash
from gym_server.sdk.tasks import Task, check_task_field
from gym_server.sdk.tools import ToolError, tool

__all__ = ["SYSTEM_PROMPT", "SupportEnv"]

SYSTEM_PROMPT = (
    "You are a customer-support agent of an online shop. Help the customer with the tools; talk to them "
    "with plain messages (they answer). Dates are YYYY-MM-DD.\n\n" + POLICY
)
Line = Annotated[str, Field(max_length=300)]


class SupportEnv(Environment):
    """Customer support over a per-task orders database, a written policy and a scripted customer."""

    name = "support"
    reward_type = "binary: the final orders equal the gold state and no policy rule was broken"
    hedge_probe = False  # scored on the database and the actions taken, never on what the agent says
    description = "τ-bench-like customer support: tools on a database, a written policy, a simulated user."
    multi_turn = True
    max_turns = 20
    system_prompt = SYSTEM_PROMPT
    verifier_version = content_hash([Path(__file__), Path(store_module.__file__), Path(user_module.__file__)])
    # its state is the orders database and the scripted user, plain Python: deep-copied
    fork_mode = ForkMode.COPY

    desk: Desk
    user: SimulatedUser

    @classmethod
    def check_task(cls, task: Task) -> None:
        """`answer` is a `SupportAnswer`; `metadata.db` is a `SupportDB`."""
        check_task_field(SupportAnswer, task.answer, "answer")
        check_task_field(SupportDB, task.metadata.get("db"), "metadata.db")

    def reference_solution(self) -> list[dict[str, Any]]:
        """Assistant messages that handle the task by the policy against the scripted user (reward 1.0)."""
        from gym_env_support.reference import reference_messages

        return reference_messages(self.task)

    def hack_probes(self) -> list[HackProbe]:
        """Claiming the request done in prose, a transfer nobody needed, and the requested action taken
        without verifying the customer's identity: none may pay."""
        goal = SupportAnswer.model_validate(self.task.answer).goal
        probes = [
            HackProbe(
                name="claims-done",
                messages=[
                    {"role": "assistant", "content": "All done: your request has been handled. Goodbye!"}
                ],
                why="a claim in prose, with no action taken",
            )
        ]
        if not goal.transfer:
            probes.append(
                HackProbe(
                    name="needless-transfer",
                    messages=[tool_call_message("transfer_to_human", {"summary": "the customer"}, "probe_1")],
                    why="handing off a request the desk can handle",
                )
            )
        actions = {"refund": "refund_order", "cancel": "cancel_order"}
        if goal.kind in actions:
            probes.append(
                HackProbe(
                    name="acts-unverified",
                    messages=[
                        tool_call_message(actions[goal.kind], {"order_id": goal.order_id}, "probe_1"),
                        {"role": "assistant", "content": "All done. Is there anything else I can help with?"},
                    ],
                    why="the requested action taken before verifying identity breaks the policy",
                )
            )
        return probes

    async def setup(self) -> None:
        answer = SupportAnswer.model_validate(self.task.answer)
        self.answer = answer
        self.desk = Desk(SupportDB.model_validate(self.task.metadata.get("db")))
        self.user = SimulatedUser(answer.user, answer.goal, str(self.task.prompt))
        self.violations: list[str] = []
        self.ever_verified = False
        self.looked_up: set[str] = set()
        self.transferred = False

    def opening_messages(self) -> list[dict[str, Any]]:
        """The policy with today's date, then the customer's request."""
        system = f"{SYSTEM_PROMPT}\n\nToday is {self.desk.today.isoformat()}."
        return [{"role": "system", "content": system}, {"role": "user", "content": str(self.task.prompt)}]

    def _satisfied(self) -> bool:
        goal = self.answer.goal
        gold = [
            order.model_dump(mode="json") for order in sorted(self.answer.gold_orders, key=lambda o: o.id)
        ]
        return goal.allowed and not goal.transfer and self.desk.state() == gold

    async def respond(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """A plain message goes to the customer; their reply comes back (and may end the episode)."""
        reply = self.user.reply(str(message.get("content") or ""), satisfied=self._satisfied())
        if reply.done:
            self.finish("user_left")
        return [{"role": "user", "content": reply.text}]

    def _order(self, order_id: str) -> Order:
        order = self.desk.orders.get(order_id.strip().upper())
        if order is None:
            raise ToolError(f"no order {order_id[:40]!r}; order ids look like O-1234.")
        return order

    def _act(self, action: str, order: Order) -> None:
        problem = policy_problem(self.desk, action, order)
        if problem is not None:
            self.violations.append(f"{problem}:{order.id}")

    @tool
    async def find_customer(self, email: Line) -> dict[str, str]:
        """Find a customer by the email address on their account.

        Args:
            email: the email address the customer gave
        """
        customer = self.desk.by_email(email)
        if customer is None:
            raise ToolError(f"no customer with email {email[:80]!r}.")
        return {"customer_id": customer.id, "name": customer.name}

    @tool
    async def verify_identity(self, customer_id: Line, zip_code: Line) -> str:
        """Verify that the person you talk to owns an account, by the zip code they give.

        Args:
            customer_id: the id find_customer returned
            zip_code: the zip code the customer gave
        """
        customer = self.desk.customers.get(customer_id.strip())
        if customer is None:
            raise ToolError(f"no customer {customer_id[:40]!r}; find_customer(email) gives the id.")
        if zip_code.strip() != customer.zip:
            raise ToolError("the zip code does not match this account: identity not verified.")
        self.desk.verified = customer.id
        self.ever_verified = True
        return f"Identity verified: {customer.name} ({customer.id})."

    @tool
    async def get_order(self, order_id: Line) -> dict[str, Any]:
        """Look up one order: its customer, item, total, status, delivery date, refund and address.

        Args:
            order_id: the order's id, e.g. O-1234
        """
        order = self._order(order_id)
        self.looked_up.add(order.id)
        return order.model_dump(mode="json")

    @tool
    async def list_orders(self, customer_id: Line) -> list[dict[str, Any]]:
        """List a customer's orders.

        Args:
            customer_id: the id find_customer returned
        """
        wanted = customer_id.strip()
        orders = [order for order in self.desk.orders.values() if order.customer_id == wanted]
        self.looked_up.update(order.id for order in orders)
        return [order.model_dump(mode="json") for order in orders]

    @tool
    async def refund_order(self, order_id: Line) -> str:
        """Refund an order in full.

        Args:
            order_id: the order to refund
        """
        order = self._order(order_id)
        if order.refunded:
            raise ToolError(f"order {order.id} is already refunded.")
        self._act("refund", order)
        order.refunded = True
        return f"Refunded {order.total:.2f} for order {order.id}."

    @tool
    async def cancel_order(self, order_id: Line) -> str:
        """Cancel an order.

        Args:
            order_id: the order to cancel
        """
        order = self._order(order_id)
        if order.status == "cancelled":
            raise ToolError(f"order {order.id} is already cancelled.")
        self._act("cancel", order)
        order.status = "cancelled"
        return f"Cancelled order {order.id}."

    @tool
    async def change_address(self, order_id: Line, new_address: Line) -> str:
        """Change the shipping address of an order.

        Args:
            order_id: the order to change
            new_address: the full new address, as the customer gave it
        """
        order = self._order(order_id)
        if not new_address.strip():
            raise ToolError("new_address must not be empty.")
        self._act("change_address", order)
        order.address = new_address.strip()
        return f"Order {order.id} now ships to {order.address}."

    @tool
    async def transfer_to_human(self, summary: Line) -> str:
        """Hand the conversation to a human agent; the episode ends.

        Args:
            summary: one or two sentences on what the customer needs
        """
        self.transferred = True
        if not self.answer.goal.transfer:
            self.violations.append("needless_transfer")
        self.finish("transferred")
        return "Transferred to a human agent."

    async def verify(self) -> VerifyResult:
        gold = [
            order.model_dump(mode="json") for order in sorted(self.answer.gold_orders, key=lambda o: o.id)
        ]
        db_match = self.desk.state() == gold
        goal = self.answer.goal
        transfer_ok = self.transferred == goal.transfer
        checked = goal.order_id in self.looked_up
        # A refusal needs no action, so the database alone would pay an agent that did nothing at all.
        declined_ok = goal.allowed or goal.transfer or (self.ever_verified and checked)
        ok = db_match and transfer_ok and declined_ok and not self.violations
        return VerifyResult(
            reward=float(ok),
            components={
                "db_match": float(db_match),
                "violations": float(len(self.violations)),
                "verified": float(self.ever_verified),
                "checked": float(checked),
                "transferred": float(self.transferred),
            },
            info={
                "violations": self.violations[:10],
                "goal": self.answer.goal.kind,
                "done_reason": self.done_reason,
            },
        )
