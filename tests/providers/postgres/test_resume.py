"""Resume tokens on PostgreSQL: a live query opened with ``resume_from`` answers with one Delta of
what changed since (removals included), or with an Initial marked ``reset`` when the store cannot
tell; a gap is recovered by reading what changed since the query's position.

Every test here fails against 8d14411, where ``query`` took no ``resume_from`` and frames carried
no token; the race test's negative control shows what a sequence-like position (every
transaction below the highest one seen) would miss.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers.postgres import PostgresStore
from rxmesh.providers.postgres._positions import parse_token
from tests.helpers import until
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import (
    drop_schemas,
    execute,
    started,
    terminate_listener,
    unique_prefix,
)

pytestmark = pytest.mark.postgres

WAIT = 5.0
OPEN = NodeQuery(partition="p", where=field("status").eq("open"))


def node(path: str, **content: Any) -> MeshNode:
    return MeshNode(path=path, content=content, version=1)


async def _first(store: PostgresStore, query: NodeQuery, token: str | None = None) -> QueryFrame:
    return await first_value(store.query(query, resume_from=token), timeout=WAIT)


async def test_a_resume_answers_what_changed_since_removals_included(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        for i in range(20):
            await store.write(node(f"p/n{i:02d}", i=i))
        initial = await _first(store, NodeQuery(partition="p"))
        assert initial.kind is FrameKind.INITIAL and len(initial.nodes) == 20
        assert initial.resume_token is not None and not initial.reset

        await store.update(MeshNode(path="p/n03", content={"i": 300}))
        await store.delete("p/n05")
        await store.write(node("p/new", i=99))
        await store.move("p/n07", "p/moved")

        resumed = await _first(store, NodeQuery(partition="p"), initial.resume_token)
        assert resumed.kind is FrameKind.DELTA and resumed.resumed and not resumed.reset
        assert [n.path for n in resumed.nodes] == ["p/moved", "p/n03", "p/new"]
        assert resumed.nodes[1].content == {"i": 300}
        assert resumed.removed == ("p/n05", "p/n07")
        assert len(resumed.model_dump_json()) < len(initial.model_dump_json()) / 3
        # Its token is a later position: resuming from it again finds nothing new.
        again = await _first(store, NodeQuery(partition="p"), resumed.resume_token)
        assert again.resumed and again.nodes == () and again.removed == ()


async def test_a_resumed_filter_reports_a_node_that_stopped_matching_as_removed(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        await store.write(node("p/a", status="open"))
        await store.write(node("p/b", status="shut"))
        initial = await _first(store, OPEN)
        assert [n.path for n in initial.nodes] == ["p/a"]
        await store.update(MeshNode(path="p/a", content={"status": "shut"}))
        await store.update(MeshNode(path="p/b", content={"status": "open"}))
        resumed = await _first(store, OPEN, initial.resume_token)
        assert [n.path for n in resumed.nodes] == ["p/b"]
        assert resumed.removed == ("p/a",)


@pytest.mark.parametrize(
    "token",
    [
        "pg1/0_0_other_/1:1:",  # another database
        "garbage",
        "pg1/x/1:2:3",
        "pg1/" + "9" * 300,
        "",
        "pg1/1_1_p/5:3:",  # xmax below xmin
    ],
)
async def test_a_token_the_store_cannot_read_answers_a_reset_never_an_error(
    pg_dsn: str, prefix: str, token: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        await store.write(node("p/a"))
        frame = await _first(store, NodeQuery(partition="p"), token)
        assert frame.kind is FrameKind.INITIAL and frame.reset
        assert [n.path for n in frame.nodes] == ["p/a"]
        assert frame.resume_token is not None


async def test_another_stores_token_resets(pg_dsn: str, prefix: str) -> None:
    """A store with another schema prefix is another store: its token is not comparable."""
    other = unique_prefix()
    async with started(pg_dsn, prefix) as store, started(pg_dsn, other) as neighbour:
        await store.write(node("p/a"))
        await neighbour.write(node("p/a"))
        token = (await _first(neighbour, NodeQuery(partition="p"))).resume_token
        frame = await _first(store, NodeQuery(partition="p"), token)
        assert frame.reset
        # Negative control: the store's own token resumes.
        own = (await _first(store, NodeQuery(partition="p"))).resume_token
        assert (await _first(store, NodeQuery(partition="p"), own)).resumed


async def test_two_transactions_committing_out_of_order_are_both_seen_by_a_resume(
    pg_dsn: str, prefix: str
) -> None:
    """The race a sequence cannot survive: A takes its transaction id first and commits last;
    B commits in between; a reader takes its Initial (and its token) between the two commits,
    so it sees B but not A. Resuming from that token must bring A."""
    async with started(pg_dsn, prefix) as store:
        await store.write(node("p/seed"))
        table = store._table("p")
        first = await asyncpg.connect(pg_dsn)
        second = await asyncpg.connect(pg_dsn)
        try:
            a = first.transaction()
            await a.start()
            await first.execute(
                f"INSERT INTO {table} (path, content, version) VALUES ('p/a', '{{}}', 1)"
            )
            b = second.transaction()
            await b.start()
            await second.execute(
                f"INSERT INTO {table} (path, content, version) VALUES ('p/b', '{{}}', 1)"
            )
            await b.commit()  # B commits first, with the higher transaction id
            initial = await _first(store, NodeQuery(partition="p"))
            assert [n.path for n in initial.nodes] == ["p/b", "p/seed"]
            await a.commit()  # A commits after the reader's snapshot
        finally:
            await first.close()
            await second.close()
        resumed = await _first(store, NodeQuery(partition="p"), initial.resume_token)
        assert [n.path for n in resumed.nodes] == ["p/a"]

        # Negative control: "everything from the highest transaction the reader saw" misses A.
        assert initial.resume_token is not None
        position = parse_token(initial.resume_token, await store._identity())
        assert position is not None
        conn = await asyncpg.connect(pg_dsn)
        try:
            highest_seen = await conn.fetchval(
                f"SELECT max(changed_xid)::text FROM {table} WHERE path IN ('p/b', 'p/seed')"
            )
            naive = await conn.fetch(
                f"SELECT path FROM {table} WHERE changed_xid > $1::text::xid8", highest_seen
            )
        finally:
            await conn.close()
        assert [row[0] for row in naive] == []


async def test_a_token_older_than_the_tombstones_retention_resets(pg_dsn: str) -> None:
    """With a retention of a few milliseconds, a deletion after the token is pruned by a later
    deletion, and the resume cannot tell: a reset. Negative control: the same steps with the
    default retention resume, the deletion reported."""
    answers: dict[str, QueryFrame] = {}
    for retention in (0.005, None):
        prefix = unique_prefix()
        options = {} if retention is None else {"tombstone_retention": retention}
        async with started(pg_dsn, prefix, **options) as store:
            for path in ("p/a", "p/b", "p/c"):
                await store.write(node(path))
            token = (await _first(store, NodeQuery(partition="p"))).resume_token
            await store.delete("p/a")
            # The tombstone of p/a and the last pruning are older than the retention.
            schema = f'"{store.schema_of("p")}"'
            await execute(
                pg_dsn, f"UPDATE {schema}.tombstones SET deleted_at = now() - interval '1 second'"
            )
            await execute(
                pg_dsn, f"UPDATE {schema}.horizon SET pruned_at = now() - interval '1 second'"
            )
            await store.delete("p/b")  # prunes what is older than the retention
            answers[str(retention)] = await _first(store, NodeQuery(partition="p"), token)
        await drop_schemas(pg_dsn, prefix)
    assert answers["0.005"].reset and [n.path for n in answers["0.005"].nodes] == ["p/c"]
    kept = answers["None"]
    assert kept.resumed and kept.removed == ("p/a", "p/b")


async def test_a_partition_made_after_the_token_resets(pg_dsn: str, prefix: str) -> None:
    async with started(pg_dsn, prefix) as store:
        token = (await _first(store, NodeQuery(partition="q"))).resume_token
        await store.write(node("q/a"))
        frame = await _first(store, NodeQuery(partition="q"), token)
        assert frame.reset and [n.path for n in frame.nodes] == ["q/a"]


async def test_a_gap_is_recovered_by_position_without_a_re_select(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes made behind a lost listener come as one Delta read by position: no re-select
    runs. Negative control: once the partition's tombstones were pruned past the query's
    position, the next gap is recovered by a re-select (counted), with the same answer."""
    reselects: list[NodeQuery] = []
    original = PostgresStore._reselect_rows

    async def counting(self: PostgresStore, query: NodeQuery, each: Any) -> Any:
        reselects.append(query)
        return await original(self, query, each)

    monkeypatch.setattr(PostgresStore, "_reselect_rows", counting)
    async with started(pg_dsn, prefix, reconnect_backoff=(0.3,)) as store:
        for i in range(10):
            await store.write(node(f"p/n{i}", i=i))
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            initial = await frames.next()
            await terminate_listener(pg_dsn, store)
            table = store._table("p")
            await execute(
                pg_dsn,
                f"UPDATE {table} SET content = $1::jsonb, version = version + 1"
                " WHERE path = 'p/n1'",
                json.dumps({"i": 100}),
            )
            await execute(pg_dsn, f"DELETE FROM {table} WHERE path = 'p/n2'")
            delta = await frames.next()
            assert [n.path for n in delta.nodes] == ["p/n1"] and delta.removed == ("p/n2",)
            assert reselects == []
            assert delta.resume_token != initial.resume_token

            horizon = f'"{store.schema_of("p")}".horizon'
            # Pruned past every position: the store cannot tell any more.
            await execute(pg_dsn, f"UPDATE {horizon} SET pruned_through = pg_current_xact_id()")
            await terminate_listener(pg_dsn, store)
            await execute(pg_dsn, f"DELETE FROM {table} WHERE path = 'p/n3'")
            delta = await frames.next()
            assert delta.nodes == () and delta.removed == ("p/n3",)
            assert reselects == [NodeQuery(partition="p")]
        finally:
            frames.dispose()


async def test_the_token_moves_on_with_the_deltas_once_the_feed_reached_it(
    pg_dsn: str, prefix: str
) -> None:
    """A delta's token is a later position than the Initial's once a notification of a
    transaction begun after the dispatcher's snapshot has come: resuming from it brings only
    what came after, not everything since the Initial."""
    async with started(pg_dsn, prefix) as store:
        await store.write(node("p/seed"))
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            initial = await frames.next()
            tokens = [initial.resume_token]
            for i in range(6):
                await store.write(node(f"p/w{i}"))
                tokens.append((await frames.next()).resume_token)
            assert len(set(tokens)) > 2, tokens  # it moved, more than once
            last = tokens[-1]
            await store.write(node("p/after"))
            await frames.next()
        finally:
            frames.dispose()
        resumed = await _first(store, NodeQuery(partition="p"), last)
        assert resumed.resumed
        paths = [n.path for n in resumed.nodes]
        assert "p/after" in paths
        assert "p/w0" not in paths  # what the token already covered does not come again
        # Negative control: the Initial's token brings everything written since.
        everything = await _first(store, NodeQuery(partition="p"), initial.resume_token)
        assert [n.path for n in everything.nodes][:3] == ["p/after", "p/w0", "p/w1"]


async def test_a_snapshot_is_reached_only_by_a_transaction_begun_after_it(
    pg_dsn: str, prefix: str
) -> None:
    """The feed publishes the snapshot it took after a fetch only once a notification of a
    transaction whose id is at least that snapshot's xmax arrives. A transaction that had its
    id before the snapshot and commits after it (its notification may come before others the
    snapshot sees) reaches nothing."""
    async with started(pg_dsn, prefix) as store:
        reached: list[str] = []
        changes = Recorder(store.changes)
        subscription = store._feed.positions.subscribe(reached.append)
        slow = await asyncpg.connect(pg_dsn)
        try:
            early = slow.transaction()
            await early.start()
            await store.write(node("p/first"))  # the table exists now
            table = store._table("p")
            await slow.execute(
                f"INSERT INTO {table} (path, content, version) VALUES ('p/early', '{{}}', 1)"
            )
            await store.write(node("p/second"))
            await changes.next_matching(lambda c: c.path == "p/second")
            # The batch of p/second reached the snapshot taken after p/first's fetch, then the
            # dispatcher took the next one (p/early still running: listed as in progress).
            await until(lambda: store._dispatcher_checkpoint() not in (None, *reached))
            checkpoint = store._dispatcher_checkpoint()
            assert checkpoint is not None
            count = len(reached)
            await early.commit()  # its id is below the checkpoint's xmax
            await changes.next_matching(lambda c: c.path == "p/early")
            assert len(reached) == count  # the negative control: nothing reached
            await store.write(node("p/third"))  # begun after the checkpoint
            await changes.next_matching(lambda c: c.path == "p/third")
            assert reached[count:][:1] == [checkpoint]
        finally:
            subscription.dispose()
            changes.dispose()
            await slow.close()
