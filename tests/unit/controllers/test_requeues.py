"""Reconcile-again timers: one per key, the earliest ask wins, cancel and close stop them."""

from __future__ import annotations

import asyncio

from kyai.controllers._requeues import Requeues


async def test_the_earliest_ask_wins_and_fires_once() -> None:
    fired: list[str] = []
    requeues: Requeues[str] = Requeues(fired.append)
    requeues.ask("a", 0.2)
    requeues.ask("a", 0.01)  # sooner: replaces the first
    requeues.ask("a", 0.5)  # later: ignored
    requeues.ask("b", None)  # nothing asked
    await asyncio.sleep(0.05)
    assert fired == ["a"]
    await asyncio.sleep(0.5)
    assert fired == ["a"]
    requeues.ask("a", 0.01)  # fired timers are forgotten: a new ask counts
    await asyncio.sleep(0.05)
    assert fired == ["a", "a"]


async def test_cancel_and_close_stop_pending_timers() -> None:
    fired: list[str] = []
    requeues: Requeues[str] = Requeues(fired.append)
    requeues.ask("a", 0.02)
    requeues.ask("b", 0.02)
    requeues.ask("c", 0.02)
    requeues.cancel("a")
    requeues.cancel("missing")
    await asyncio.sleep(0.05)
    assert sorted(fired) == ["b", "c"]
    requeues.ask("d", 0.02)
    requeues.close()
    await asyncio.sleep(0.05)
    assert sorted(fired) == ["b", "c"]
