"""A live read takes ``created_at`` as text and makes of it the datetime asyncpg's binary decoding
would have made (issue 16, item 3: that decoding was 24 of the 57 ms of client CPU of a 50k-row
read): aware and in UTC, whatever the session's ``DateStyle`` and ``TimeZone``, infinite times as
asyncpg gives them, times Python cannot hold refused by name."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.model import ChangeFeedGap, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers.postgres import _live, _rows
from tests.live.test_postgres_live import _gap
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

WAIT = 10.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-02 01:42:55.318558+00", datetime(2026, 12, 2, 1, 42, 55, 318558, tzinfo=UTC)),
        ("2026-12-02 01:42:55+00", datetime(2026, 12, 2, 1, 42, 55, tzinfo=UTC)),
        ("2026-12-02 01:42:55.5+00", datetime(2026, 12, 2, 1, 42, 55, 500000, tzinfo=UTC)),
        ("2026-12-02 07:12:55.5+05:30", datetime(2026, 12, 2, 1, 42, 55, 500000, tzinfo=UTC)),
        ("0001-01-01 00:00:00+00", datetime(1, 1, 1, tzinfo=UTC)),
        (None, None),
    ],
)
def test_a_stamp_text_is_the_aware_utc_datetime(text: str | None, expected: Any) -> None:
    (stamp,) = _rows._stamps_of([text])
    assert stamp == expected
    assert stamp is None or stamp.tzinfo is UTC


def test_infinite_stamps_are_what_asyncpg_makes_of_them_and_the_rest_still_parses() -> None:
    stamps = _rows._stamps_of(["infinity", "2026-01-01 00:00:00+00", "-infinity", None])
    assert stamps == [datetime.max, datetime(2026, 1, 1, tzinfo=UTC), datetime.min, None]


@pytest.mark.parametrize(
    "text",
    ["0044-03-15 00:00:00+00 BC", "12345-01-01 00:00:00+00", "soon", "2026-01-01 00:00:00"],
    ids=["bc", "year-12345", "not-a-time", "no-offset"],
)
def test_a_stamp_python_cannot_hold_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="is not a time this process can hold") as raised:
        _rows._stamps_of(["2026-01-01 00:00:00+00", text])
    assert repr(text) in str(raised.value)


# The times a table may hold, each read back through a live read and through asyncpg's binary
# decoding (the reference).
_TIMES = [
    "2026-12-02 01:42:55.318558+00",
    "2026-12-02 01:42:55+00",
    "2026-12-02 01:42:55.5+00",
    "2026-06-01 12:00:00.000001+05:30",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "infinity",
    "-infinity",
]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "settings",
    [{}, {"DateStyle": "SQL, DMY", "TimeZone": "Asia/Kolkata"}, {"DateStyle": "German"}],
    ids=["defaults", "sql-dmy-kolkata", "german"],
)
async def test_a_live_read_makes_the_datetimes_asyncpg_makes_whatever_the_session_settings(
    pg_dsn: str, prefix: str, settings: dict[str, str]
) -> None:
    """The session's own settings (here from the DSN, as a role's or a server's defaults would
    be) would render ``created_at`` as ``02.12.2026 07:12:55.318558 IST``; the read's transaction
    sets ISO and UTC for itself. The negative control is the reference read: on the same
    connection settings, asyncpg's binary decoding, which those settings do not touch."""
    query = "&".join(f"{key}={value}" for key, value in settings.items())
    dsn = pg_dsn + ("&" if "?" in pg_dsn else "?") + query if settings else pg_dsn
    async with started(dsn, prefix) as store:
        await store.write(MeshNode(path="p/seed", version=1))
        table = f'"{store.schema_of("p")}".nodes'
        conn = await asyncpg.connect(dsn)
        try:
            for i, at in enumerate(_TIMES):
                await conn.execute(
                    f"INSERT INTO {table} (path, version, created_at)"
                    " VALUES ($1, 1, $2::text::timestamptz)",
                    f"p/t{i}",
                    at,
                )
            if settings:
                shown = await conn.fetchval(
                    f"SELECT created_at::text FROM {table} WHERE path = 'p/t0'"
                )
                assert shown != "2026-12-02 01:42:55.318558+00"  # the session's own rendering
            reference = {
                row["path"]: row["created_at"]
                for row in await conn.fetch(f"SELECT path, created_at FROM {table}")
            }
        finally:
            await conn.close()
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        read = {node.path: node.created_at for node in frame.nodes}
        assert read == reference
        for path, stamp in read.items():
            expected = reference[path]
            assert type(stamp) is type(expected)
            assert getattr(stamp, "tzinfo", None) is getattr(expected, "tzinfo", None), path
        assert read["p/t3"] == datetime(2026, 6, 1, 6, 30, 0, 1, tzinfo=UTC)
        assert read["p/t3"].utcoffset() == timedelta(0)


@pytest.mark.postgres
async def test_a_gap_re_select_builds_only_the_rows_that_changed(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-select compares each re-read row's creation time, read as text, with the known
    node's datetime: equal times must compare equal, or every row would be rebuilt (50 here)."""
    async with started(pg_dsn, prefix, reconnect_backoff=(0.2,)) as store:
        stamped = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
        nodes = [
            MeshNode(path=f"p/{i:02d}", version=1, created_at=stamped, request_id=f"r{i}")
            for i in range(50)
        ]
        await first_value(store.write_many(nodes), timeout=30)
        built: list[str] = []
        build = _live._stored_nodes_of

        def counting(rows: Any, partition: str, **options: Any) -> list[MeshNode]:
            made = build(rows, partition, **options)
            built.extend(node.path for node in made)
            return made

        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            assert len((await frames.next()).nodes) == 50
            # The write's own notifications may reach the feed after the Initial (their rows
            # are then fetched and built, and found unchanged): a later write's delta says they
            # were all handled before the count starts.
            await asyncio.wait_for(store.write(MeshNode(path="p/zz", version=1)), 30)
            assert [node.path for node in (await frames.next()).nodes] == ["p/zz"]
            monkeypatch.setattr(_live, "_stored_nodes_of", counting)
            await _gap(store, pg_dsn, gaps, "p/missed")
            delta = await frames.next()
            assert [node.path for node in delta.nodes] == ["p/missed"]
            assert built == ["p/missed"]
        finally:
            gaps.dispose()
            frames.dispose()


@pytest.mark.postgres
async def test_the_reads_settings_are_gone_from_the_connection_after_it(
    pg_dsn: str, prefix: str
) -> None:
    """``SET LOCAL`` ends with the read's transaction: the pooled connection that served an
    Initial and a gap's re-select keeps the session's own settings (a plain ``SET`` would leave
    ISO and UTC on it, for the next user of a pooler's server connection too)."""
    settings = "DateStyle=SQL,%20DMY&TimeZone=Asia/Kolkata"
    dsn = pg_dsn + ("&" if "?" in pg_dsn else "?") + settings
    async with started(dsn, prefix, min_size=1, max_size=1) as store:
        await store.write(MeshNode(path="p/a", version=1))
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        assert [node.path for node in frame.nodes] == ["p/a"]
        pool = store._pool
        assert pool is not None
        async with pool.acquire() as conn:  # the one connection that served the read
            assert await conn.fetchval("SHOW DateStyle") == "SQL, DMY"
            assert await conn.fetchval("SHOW TimeZone") == "Asia/Kolkata"
