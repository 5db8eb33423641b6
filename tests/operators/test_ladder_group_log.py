"""The members of one write group share the group's one error object, and the ladder logs its
retry once per group, not once per member (the rest at DEBUG; each member's own hook and retry
are unchanged).

Fails at 1d389e8 because every member's ladder logged the same WARNING: a group of 6 creates
answered by one unreachable fault printed 6 identical lines. Negative control: callers whose
errors are distinct objects (separate faults) each log their own WARNING.
"""

from __future__ import annotations

import asyncio

from rxmesh.operators import Ladder
from rxmesh.providers.postgres._groups import WriteGroups
from rxmesh.testing import unreachable_error
from tests.helpers import LogRecords

MEMBERS = 6
RETRY_LINE = "store not reached"


def warnings_of_retries(records: LogRecords) -> list[str]:
    return [str(r["message"]) for r in records.at("WARNING") if RETRY_LINE in str(r["message"])]


async def test_one_warning_per_retry_of_a_group(log_records: LogRecords) -> None:
    lone_may_finish = asyncio.Event()
    sent: list[list[str]] = []
    hooks: list[int] = []

    async def send(_: str, items: list[str]) -> set[str] | None:
        sent.append(items)
        raise unreachable_error("pg")  # one fault: the statement ran for every member or none

    groups: WriteGroups[str, str] = WriteGroups(send, lambda item: item, lanes=1)
    ladder = Ladder.of((0.0,), on_retry=lambda error, attempt, delay: hooks.append(attempt))

    async def create(path: str) -> str:
        tries = 0

        async def write() -> str:
            nonlocal tries
            tries += 1
            if tries > 1:
                return path  # the retry lands alone
            if groups.enter("p"):
                try:
                    await lone_may_finish.wait()
                    return path
                finally:
                    groups.leave("p")
            if await groups.join("p", path):
                return path
            raise AssertionError("the group cannot have landed")

        return await ladder.call(write)

    async with asyncio.timeout(5):
        lone = asyncio.create_task(create("p/0"))
        await asyncio.sleep(0)
        members = [asyncio.create_task(create(f"p/{i}")) for i in range(1, MEMBERS + 1)]
        await asyncio.sleep(0)
        lone_may_finish.set()
        results = await asyncio.gather(lone, *members)

    assert sorted(results) == sorted(f"p/{i}" for i in range(MEMBERS + 1))
    assert [len(group) for group in sent] == [MEMBERS]  # one group of six, one error object
    assert hooks == [1] * MEMBERS  # every member retried, each told to its hook
    assert len(warnings_of_retries(log_records)) == 1
    debug = [r for r in log_records.at("DEBUG") if RETRY_LINE in str(r["message"])]
    assert len(debug) == MEMBERS - 1


async def test_negative_control_distinct_faults_each_log(log_records: LogRecords) -> None:
    ladder = Ladder.of((0.0,))

    async def create() -> str:
        tries = 0

        async def write() -> str:
            nonlocal tries
            tries += 1
            if tries == 1:
                raise unreachable_error("pg")  # a fault of its own
            return "ok"

        return await ladder.call(write)

    async with asyncio.timeout(5):
        await asyncio.gather(*(create() for _ in range(MEMBERS)))
    assert len(warnings_of_retries(log_records)) == MEMBERS
