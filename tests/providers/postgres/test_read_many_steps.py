"""``PostgresStore.read_many`` checks a long list of paths a loop step at a time (issue 16, item
5): the mesh's bulk reads its 10,000 paths this way on every attempt of its retry ladder, and the
checks (about 1 us a path) were one step of 10-17 ms each. Counted in loop turns, not time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import rxmesh.providers.postgres._reads as reads
from tests.helpers import LoopTurns
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres


@pytest.fixture
async def prefix(pg_dsn: str) -> AsyncIterator[str]:
    name = unique_prefix()
    yield name
    await drop_schemas(pg_dsn, name)


async def _paths_per_turn(pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> int:
    original = reads.validate_path
    async with started(pg_dsn, prefix) as store, LoopTurns() as turns:

        def noting(path: str, **options: object) -> None:
            if path.startswith("p/n"):  # the paths read (not the store's own checks of a name)
                turns.note()
            original(path, **options)  # type: ignore[arg-type]

        monkeypatch.setattr(reads, "validate_path", noting)
        found = await asyncio.wait_for(store.read_many([f"p/n{i:05d}" for i in range(10_000)]), 10)
    assert found == {}
    return turns.most_in_one_turn()


async def test_ten_thousand_paths_are_checked_a_step_at_a_time(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails against 000ebcd: all 10,000 paths were checked in one turn."""
    assert await _paths_per_turn(pg_dsn, prefix, monkeypatch) <= 2000


async def test_the_turn_count_sees_paths_checked_in_one_turn(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control of the measure: with one step for every path, one turn checks them all."""
    monkeypatch.setattr(reads, "_VALIDATE_STEP", 10**9)
    assert await _paths_per_turn(pg_dsn, prefix, monkeypatch) == 10_000
