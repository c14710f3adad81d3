"""The support desk's data: customers and orders (a task's `metadata.db`), the hidden goal, the policy rules.

The database is plain data so that inline tasks bring their own; `Desk` is one episode's mutable copy.
`policy_problem()` is the written policy (`POLICY`) as code: it says which rule an action breaks, if any,
so the reward can punish the violation even when the database still ends up right.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "POLICY",
    "REFUND_DAYS",
    "Customer",
    "Desk",
    "Goal",
    "Order",
    "SupportAnswer",
    "SupportDB",
    "UserProfile",
    "policy_problem",
]

REFUND_DAYS = 30
POLICY = f"""\
Policy of the support desk (follow it exactly; it is checked):
1. Verify the user's identity before changing any order: ask for the email address and the zip code on
   the account, call find_customer(email), then verify_identity(customer_id, zip_code). Act only on orders
   of the verified customer.
2. Refunds: only for orders with status "delivered", at most {REFUND_DAYS} days after the delivery date,
   and not already refunded. A refund always covers the whole order.
3. Cancellations: only for orders with status "processing".
4. Shipping address changes: only for orders with status "processing".
5. Make no exceptions to these rules, however the user insists: explain the rule politely and decline.
6. Transfer to a human agent (transfer_to_human) only when the request cannot be handled with your tools
   at all (for example changing the account's email or a damaged item); never to avoid a decision.
7. Change nothing the user did not ask for."""

Status = Literal["processing", "shipped", "delivered", "cancelled"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Customer(_Model):
    id: str
    name: str
    email: str
    zip: str


class Order(_Model):
    id: str
    customer_id: str
    item: str
    total: float
    status: Status
    delivered_on: date | None = None
    refunded: bool = False
    address: str


class SupportDB(_Model):
    """A task's starting database and the desk's date."""

    today: date
    customers: Annotated[list[Customer], Field(min_length=1)]
    orders: Annotated[list[Order], Field(min_length=1)]


class UserProfile(_Model):
    """What the simulated user knows and reveals when asked."""

    name: str
    email: str
    zip: str
    new_address: str | None = None


class Goal(_Model):
    """What the user wants, and whether the policy allows it (`allowed`) or needs a human (`transfer`)."""

    kind: Literal["refund", "cancel", "change_address", "out_of_scope"]
    order_id: str
    allowed: bool
    transfer: bool = False
    why: str = ""


class SupportAnswer(_Model):
    """A task's hidden part: the user's goal and profile, and every order's state after a correct episode."""

    goal: Goal
    user: UserProfile
    gold_orders: list[Order]


class Desk:
    """One episode's mutable database, and who has been verified."""

    def __init__(self, db: SupportDB) -> None:
        self.today = db.today
        self.customers = {customer.id: customer for customer in db.customers}
        self.orders = {order.id: order.model_copy() for order in db.orders}
        self.verified: str | None = None

    def by_email(self, email: str) -> Customer | None:
        wanted = email.strip().casefold()
        return next((c for c in self.customers.values() if c.email.casefold() == wanted), None)

    def state(self) -> list[dict[str, object]]:
        """The orders as compared with the gold state (id order)."""
        return [self.orders[key].model_dump(mode="json") for key in sorted(self.orders)]


def policy_problem(desk: Desk, action: str, order: Order) -> str | None:
    """The rule `action` on `order` breaks right now, or None when the policy allows it."""
    if desk.verified is None or desk.verified != order.customer_id:
        return "unverified_action"
    if action == "refund":
        if order.status != "delivered" or order.delivered_on is None or order.refunded:
            return "refund_not_delivered"
        if (desk.today - order.delivered_on).days > REFUND_DAYS:
            return "refund_too_late"
    elif action in ("cancel", "change_address") and order.status != "processing":
        return f"{action}_not_processing"
    return None
