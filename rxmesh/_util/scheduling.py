"""Scheduler resolution shared by every time-based piece of rxmesh.

Order: the scheduler passed explicitly, else the scheduler of the subscription, else an
``AsyncIOScheduler`` on the running asyncio loop, else reactivex's ``TimeoutScheduler`` (a thread
timer, used only when no asyncio loop is running: never inside an asyncio application).
"""

from __future__ import annotations

import asyncio

from reactivex import abc
from reactivex.scheduler import TimeoutScheduler
from reactivex.scheduler.eventloop import AsyncIOScheduler

__all__ = ["resolve_scheduler"]


def resolve_scheduler(
    explicit: abc.SchedulerBase | None, subscription: abc.SchedulerBase | None = None
) -> abc.SchedulerBase:
    """Pick the scheduler a time-based operator runs its timers on."""
    if explicit is not None:
        return explicit
    if subscription is not None:
        return subscription
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return TimeoutScheduler.singleton()
    return AsyncIOScheduler(loop)
