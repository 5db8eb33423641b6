"""Resume tokens under concurrent writers whose commits come out of transaction order.

Four writers hold their transactions open for a random number of loop turns, so transactions
commit in another order than they got their ids; a reader follows the live query, leaves after
a few frames and comes back with the last token it saw, again and again. Whatever the tokens
were (the Initial's, a delta's moved forward by the change feed, a resume's), the view the reader
folded must equal a fresh query once the writers are done: a token that ran ahead of what the
reader was given would lose a change for good (the final resume reads only what came after it).

The negative control: a change the frames never carried makes the comparison fail. Its power
against a wrong rule, measured: a dispatcher publishing each snapshot as soon as it takes it
(before the notifications that snapshot sees were delivered) failed it in one run of three; the
rule itself is held deterministically by test_resume.py (a snapshot is reached only by a
transaction begun after it).
"""

from __future__ import annotations

import asyncio
import json
import random

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers.postgres import PostgresStore
from tests.helpers import fold
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

WAIT = 10.0
PATHS = [f"p/n{i:02d}" for i in range(40)]


async def _writer(dsn: str, table: str, rng: random.Random, operations: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(operations):
            path = rng.choice(PATHS)
            async with conn.transaction():
                if rng.random() < 0.3:
                    await conn.execute(f"DELETE FROM {table} WHERE path = $1", path)
                else:
                    content = json.dumps({"n": rng.randrange(100), "open": rng.random() < 0.5})
                    await conn.execute(
                        f"INSERT INTO {table} (path, content, version) VALUES ($1, $2::jsonb, 1)"
                        " ON CONFLICT (path) DO UPDATE"
                        f" SET content = EXCLUDED.content, version = {table}.version + 1",
                        path,
                        content,
                    )
                for _ in range(rng.randrange(12)):  # held open while others commit
                    await asyncio.sleep(0)
    finally:
        await conn.close()


async def _follow(
    store: PostgresStore, query: NodeQuery, rng: random.Random, writing: asyncio.Event
) -> list[QueryFrame]:
    """Frames of the query, opened again and again from the last token seen, until the writers
    are done; then one last resume."""
    frames: list[QueryFrame] = []
    token: str | None = None
    while writing.is_set():
        recorder: Recorder[QueryFrame] = Recorder(store.query(query, resume_from=token))
        try:
            for _ in range(rng.randrange(1, 4)):
                try:
                    frame = await asyncio.wait_for(recorder.next(), 0.5)
                except TimeoutError:
                    break  # nothing more for now: leave and come back
                frames.append(frame)
                token = frame.resume_token or token
        finally:
            recorder.dispose()
    last = await first_value(store.query(query, resume_from=token), timeout=WAIT)
    frames.append(last)
    return frames


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    "query", [NodeQuery(partition="p"), NodeQuery(partition="p", where=field("open").eq(True))]
)
async def test_a_reader_leaving_and_resuming_ends_with_the_stores_answer(
    pg_dsn: str, prefix: str, seed: int, query: NodeQuery
) -> None:
    async with started(pg_dsn, prefix, max_size=8) as store:
        for path in PATHS[:20]:
            await store.write(MeshNode(path=path, content={"n": 0, "open": True}, version=1))
        table = store._table("p")
        writing = asyncio.Event()
        writing.set()
        reader = asyncio.ensure_future(_follow(store, query, random.Random(seed + 100), writing))
        async with asyncio.timeout(60):
            await asyncio.gather(
                *(_writer(pg_dsn, table, random.Random(seed * 10 + w), 80) for w in range(6))
            )
            writing.clear()
            frames = await reader
        view: dict[str, MeshNode] = {}
        for frame in frames:
            fold(view, frame)
        fresh = await first_value(store.query(query), timeout=WAIT)
        assert {p: (n.version, n.content) for p, n in view.items()} == {
            n.path: (n.version, n.content) for n in fresh.nodes
        }
        assert any(f.resumed for f in frames)  # resumes happened, not only resets
        assert len({f.resume_token for f in frames}) > 3  # and the tokens moved

        # Negative control: one change the frames never carried (what a token run ahead of
        # its frames would lose) makes the comparison fail.
        missed = next(iter(view.values()), None) or MeshNode(path="p/extra", content={})
        await store.write(MeshNode(path="p/extra", content={"n": 1, "open": True}, version=1))
        if missed.path != "p/extra":
            await store.delete(missed.path)
        again = await first_value(store.query(query), timeout=WAIT)
        assert {p: (n.version, n.content) for p, n in view.items()} != {
            n.path: (n.version, n.content) for n in again.nodes
        }
