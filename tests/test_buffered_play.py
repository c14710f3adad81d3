"""`sessions.buffered_play.play_groups`: groups admitted in order, at most `at_once` playing, and a
group's error stops the admissions and reaches the caller after the groups in play finished."""

from __future__ import annotations

import asyncio

import pytest

from gym_server.sessions.buffered_play import play_groups


async def test_groups_are_admitted_in_order_and_played_at_most_at_once() -> None:
    admitted: list[int] = []
    playing = 0
    most = 0

    async def admit(group: int) -> str:
        admitted.append(group)
        return f"g{group}"

    async def play(group_id: str, group: int) -> None:
        nonlocal playing, most
        assert group_id == f"g{group}"
        playing += 1
        most = max(most, playing)
        await asyncio.sleep(0.01)
        playing -= 1

    await play_groups(list(range(7)), admit, play, at_once=3)
    assert admitted == list(range(7)) and most == 3 and playing == 0


async def test_a_failed_group_stops_the_admissions() -> None:
    admitted: list[int] = []
    finished: list[int] = []

    async def admit(group: int) -> str:
        admitted.append(group)
        return str(group)

    async def play(group_id: str, group: int) -> None:
        await asyncio.sleep(0.01 * group)
        if group == 0:
            raise RuntimeError("driver bug")
        finished.append(group)

    with pytest.raises(RuntimeError, match="driver bug"):
        await play_groups(list(range(10)), admit, play, at_once=2)
    assert admitted == [0, 1] and finished == [1]  # the one in play finished; no third was admitted
