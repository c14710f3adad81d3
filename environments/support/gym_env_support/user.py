"""The simulated user: a deterministic script that plays a customer with one goal.

It reads the agent's plain messages with keyword rules, reveals its email, zip code, order number or new
address only when asked for them, and leaves when its request is done, when the agent has declined it
(after pushing once for an exception: policy pressure), or when its patience runs out. The same
messages always get the same replies, so episodes are reproducible and replayable.
"""

from __future__ import annotations

from dataclasses import dataclass

from gym_env_support.store import Goal, UserProfile

__all__ = ["PATIENCE", "SimulatedUser", "UserReply"]

PATIENCE = 8
DECLINES = (
    "not eligible",
    "ineligible",
    "cannot",
    "can't",
    "can not",
    "unable",
    "not able",
    "not possible",
    "isn't possible",
    "not allowed",
    "decline",
)
ZIP_WORDS = ("zip", "postal", "post code", "postcode")


@dataclass(slots=True)
class UserReply:
    text: str
    done: bool = False


class SimulatedUser:
    """One customer for one episode."""

    def __init__(self, profile: UserProfile, goal: Goal, request: str) -> None:
        self.profile = profile
        self.goal = goal
        self.request = request
        self.turns = 0
        self.pushes = 0

    def reply(self, text: str, *, satisfied: bool) -> UserReply:
        """The user's answer to one plain agent message; `satisfied`: the request is done in the database."""
        self.turns += 1
        if satisfied:
            return UserReply("Thank you, that's everything I needed. Bye!", done=True)
        lower = text.casefold()
        facts = []
        if "email" in lower:
            facts.append(f"My email is {self.profile.email}.")
        if any(word in lower for word in ZIP_WORDS):
            facts.append(f"My zip code is {self.profile.zip}.")
        if "order" in lower and ("number" in lower or " id" in lower or "which" in lower):
            facts.append(f"It's order {self.goal.order_id}.")
        if "address" in lower and self.profile.new_address and "new" in lower:
            facts.append(f"The new address is {self.profile.new_address}.")
        if facts:
            return UserReply(" ".join(facts))
        if any(word in lower for word in DECLINES):
            self.pushes += 1
            if self.pushes == 1:
                push = (
                    "Then please put me through to a person."
                    if self.goal.transfer
                    else "Can't you make an exception, just this once? I'm a loyal customer."
                )
                return UserReply(push)
            return UserReply("I see. Thanks anyway, bye.", done=True)
        if self.turns >= PATIENCE:
            return UserReply("This is taking too long. I'll try again another time. Bye.", done=True)
        return UserReply(f"Could you help me with this, please? {self.request}")
