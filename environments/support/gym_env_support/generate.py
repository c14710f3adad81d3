"""Generate the `support` tasks: a small orders database per task and one customer with one request.

Eight scenarios round-robin: a refund the policy allows, one too late, one for an order not delivered;
a cancellation allowed and one refused (already shipped); an address change allowed and one refused;
a damaged item that needs a human. The customer owns other orders too (distractors), and other
customers share the database. The gold state is the starting orders with the request applied when the
policy allows it. Seeded; rerunning writes byte-identical files.

    python -m gym_env_support.generate   #
    datasets/gym_datasets/support/{train,validation}.jsonl
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from gym_env_support.store import (
    REFUND_DAYS,
    Customer,
    Goal,
    Order,
    SupportAnswer,
    SupportDB,
    UserProfile,
)
from gym_server.sdk.tasks import DATASETS_ROOT, Task, holdout_split, write_dataset

__all__ = ["SCENARIOS", "SEED", "TASK_COUNT", "build_tasks", "write"]

SEED = 20_251_127
TASK_COUNT = 120
VALIDATION_EVERY = 5
FIRST = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jade", "Kofi", "Lena"]
LAST = ["Silva", "Okafor", "Novak", "Tanaka", "Moreau", "Haddad", "Larsen", "Rossi", "Kowalski", "Mensah"]
STREETS = ["Elm St", "Oak Ave", "Birch Rd", "Harbor Way", "Mill Ln", "Cedar Ct", "Station Rd", "Park Pl"]
TOWNS = ["Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Ashford"]
ITEMS = [("desk lamp", 39.9), ("kettle", 54.0), ("backpack", 79.5), ("headphones", 129.0), ("blender", 89.99)]
ITEMS += [("yoga mat", 25.0), ("coffee grinder", 64.5), ("rain jacket", 110.0), ("phone case", 19.99)]
SCENARIOS = [
    "refund_ok",
    "refund_late",
    "refund_undelivered",
    "cancel_ok",
    "cancel_shipped",
    "address_ok",
    "address_shipped",
    "damaged_item",
]


def _address(rng: random.Random) -> str:
    return f"{rng.randint(1, 999)} {rng.choice(STREETS)}, {rng.choice(TOWNS)} {rng.randint(10000, 99999)}"


def _order(rng: random.Random, order_id: str, customer: Customer, today: date) -> Order:
    item, price = rng.choice(ITEMS)
    status = rng.choice(["processing", "shipped", "delivered", "delivered", "cancelled"])
    delivered = today - timedelta(days=rng.randint(1, 90)) if status == "delivered" else None
    return Order(
        id=order_id,
        customer_id=customer.id,
        item=item,
        total=price,
        status=status,
        delivered_on=delivered,
        address=_address(rng),
    )


def _target(rng: random.Random, scenario: str, order: Order, today: date) -> tuple[Order, Goal, str]:
    """Shape the user's order for the scenario; the goal and why the policy allows it or not."""
    kind = {"refund": "refund", "cancel": "cancel", "addres": "change_address", "damage": "out_of_scope"}[
        scenario[:6]
    ]
    status, delivered, allowed, why = "delivered", None, True, ""
    if scenario == "refund_ok":
        delivered = today - timedelta(days=rng.randint(0, REFUND_DAYS))
    elif scenario == "refund_late":
        delivered, allowed = today - timedelta(days=rng.randint(REFUND_DAYS + 1, 120)), False
        why = f"delivered more than {REFUND_DAYS} days ago"
    elif scenario == "refund_undelivered":
        status, allowed, why = rng.choice(["processing", "shipped"]), False, "not delivered yet"
    elif scenario in ("cancel_ok", "address_ok"):
        status = "processing"
    elif scenario in ("cancel_shipped", "address_shipped"):
        status, allowed, why = "shipped", False, "already shipped"
        if rng.random() < 0.5:
            status, delivered = "delivered", today - timedelta(days=rng.randint(1, 20))
    else:
        delivered, why = today - timedelta(days=rng.randint(1, 10)), "the item arrived damaged"
    if status == "delivered" and delivered is None:
        delivered = today - timedelta(days=rng.randint(1, 10))
    shaped = order.model_copy(update={"status": status, "delivered_on": delivered, "refunded": False})
    goal = Goal(kind=kind, order_id=order.id, allowed=allowed, transfer=scenario == "damaged_item", why=why)
    return shaped, goal, scenario


def _prompt(scenario: str, name: str, order: Order, new_address: str | None) -> str:
    if scenario.startswith("refund"):
        return f"Hi, I'm {name}. I'd like a refund for my order {order.id}, the {order.item}."
    if scenario.startswith("cancel"):
        return f"Hello, this is {name}. Please cancel my order {order.id} ({order.item})."
    if scenario.startswith("address"):
        return (
            f"Hi, I'm {name}. I have moved: please send my order {order.id} to my new address, {new_address}."
        )
    return (
        f"Hi, I'm {name}. The {order.item} from my order {order.id} arrived damaged and I want to talk to "
        "someone."
    )


def _task(rng: random.Random, number: int) -> Task:
    today = date(2025, 6, 1) + timedelta(days=rng.randint(0, 150))
    names = rng.sample([(first, last) for first in FIRST for last in LAST], rng.randint(4, 6))
    customers = [
        Customer(
            id=f"C-{100 + index}",
            name=f"{first} {last}",
            email=f"{first}.{last}@mail.test".lower(),
            zip=f"{rng.randint(10000, 99999)}",
        )
        for index, (first, last) in enumerate(names)
    ]
    ids = iter(rng.sample(range(1000, 9999), 20))
    orders = [_order(rng, f"O-{next(ids)}", c, today) for c in customers for _ in range(rng.randint(1, 3))]
    customer = rng.choice(customers)
    mine = [index for index, order in enumerate(orders) if order.customer_id == customer.id]
    at = rng.choice(mine)
    scenario = SCENARIOS[number % len(SCENARIOS)]
    orders[at], goal, _ = _target(rng, scenario, orders[at], today)
    new_address = _address(rng) if scenario.startswith("address") else None
    gold = [order.model_copy() for order in orders]
    if goal.allowed and not goal.transfer:
        changes: dict[str, dict[str, Any]] = {"refund": {"refunded": True}, "cancel": {"status": "cancelled"}}
        changed = changes.get(goal.kind, {"address": new_address})
        gold[at] = gold[at].model_copy(update=changed)
    profile = UserProfile(name=customer.name, email=customer.email, zip=customer.zip, new_address=new_address)
    answer = SupportAnswer(goal=goal, user=profile, gold_orders=gold)
    db = SupportDB(today=today, customers=customers, orders=orders)
    metadata: dict[str, Any] = {"scenario": scenario, "db": db.model_dump(mode="json")}
    return Task(
        id=f"support-{number:04d}",
        prompt=_prompt(scenario, customer.name, orders[at], new_address),
        answer=answer.model_dump(mode="json"),
        metadata=metadata,
    )


def build_tasks(seed: int = SEED, count: int = TASK_COUNT) -> list[Task]:
    """Every task in id order; scenarios round-robin so each appears in both splits."""
    rng = random.Random(seed)
    return [_task(rng, number) for number in range(count)]


def write(root: Path = DATASETS_ROOT) -> dict[str, int]:
    """Write both splits under `root/support/` and return their sizes."""
    return write_dataset(root / "support", holdout_split(build_tasks(), VALIDATION_EVERY))


if __name__ == "__main__":
    print(write())
