"""The PostgreSQL store (asyncpg): a schema per partition, LISTEN/NOTIFY change feed.

This is the only module of rxmesh that imports asyncpg. Layout: partition ``P`` lives in the
schema ``"<schema_prefix>P"`` (default prefix ``rxmesh_``; partitions are case-sensitive and the
quoted identifier keeps their case, so the mapping is injective), one ``nodes`` table per schema.
Statement-level triggers ``pg_notify`` small payloads on a single channel: ``[schema, op,
[[path, version], ...]]``, one per ~6 kB of changed rows (a bulk window of 1000 rows is a handful
of NOTIFYs, not 1000); the change feed fetches the rows itself and reports one change per row.

Every driver/network failure crosses :meth:`PostgresStore._raise_at_boundary`, the ONE place
where asyncpg's shapes (measured in ``shared/design/asyncpg-faults.md``) become
:class:`~rxmesh.exceptions.StoreError` with the right sqlstate, ``raise ... from exc``.

Behind a transaction-pooling proxy (PgBouncer, RDS Proxy, Supavisor) every statement may run on
another server connection, so nothing here keeps session state across transactions: advisory
locks are transaction-scoped, prepared statements are unnamed when a pooler is detected (asyncpg's
``statement_cache_size=0``), and the change feed LISTENs on ``listen_dsn`` (a direct connection)
and is verified end to end: a probe NOTIFY sent through the pool must reach the listener.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from itertools import repeat
from types import TracebackType
from typing import Any, Literal, NoReturn, TypeVar
from urllib.parse import parse_qs, urlparse

import asyncpg
import asyncpg.exceptions as pgexc
from asyncpg.pool import PoolConnectionProxy
from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable
from reactivex.subject import Subject

from rxmesh._collector import collector_paused
from rxmesh._path_order import PathOrdered, path_ordered, strictly_ascending
from rxmesh._trusted import (
    fields_of,
    set_dict,
    set_extra,
    set_fields_set,
    set_private,
    trusted,
)
from rxmesh.aio import from_async
from rxmesh.exceptions import (
    ChangeFeedUnverifiedError,
    StoreConflictError,
    StoreError,
    StorePoolExhaustedError,
    StoreVersionConflictError,
)
from rxmesh.faults import exception_chain, is_no_answer_in_time, is_transient_connect_fault
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    FrameKind,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
    WindowCommitted,
    partition_of,
    validate_path,
)
from rxmesh.providers._attempts import SharedAttempts
from rxmesh.providers._feed import (
    BATCH_SIZE,
    DEFAULT_MALFORMED_LOG_INTERVAL,
    ChangeFeedState,
    ChangeFeedStatistics,
    Entry,
    FeedBook,
    MalformedNotificationError,
    Role,
    parse_notification,
    parse_probe,
    probe_marker,
    probe_payload,
)
from rxmesh.providers._groups import WriteGroups
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW

__all__ = [
    "DEFAULT_FEED_LOSS_BOUND",
    "DEFAULT_MALFORMED_LOG_INTERVAL",
    "DEFAULT_RECONNECT_BACKOFF",
    "DEFAULT_SCHEMA_PREFIX",
    "TARGET_SESSION_ATTRS",
    "ChangeFeedState",
    "ChangeFeedStatistics",
    "ChangeFeedUnverifiedError",
    "PostgresStore",
    "PostgresStoreStatistics",
    "quote_identifier",
    "schema_for_partition",
]

T = TypeVar("T")

DEFAULT_SCHEMA_PREFIX = "rxmesh_"
"""Schemas of partitions are named ``<prefix><partition>``."""

DEFAULT_RECONNECT_BACKOFF: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
"""Delays (s) between re-connect attempts of the change-feed listener; the last one repeats."""

DEFAULT_FEED_LOSS_BOUND = 30.0
"""Seconds the change feed may stay lost before every live query of the store ends with a
transient :class:`~rxmesh.exceptions.StoreError`: its view is no longer maintained."""

TARGET_SESSION_ATTRS: frozenset[str] = frozenset(
    {"any", "primary", "standby", "prefer-standby", "read-write", "read-only"}
)
"""The values asyncpg (like libpq) accepts for ``target_session_attrs``."""

_PREFIX_RULE = re.compile(r"[a-z][a-z0-9_]{0,14}")
_HELD_STAMP = (
    "CASE WHEN NOT isfinite(created_at) OR created_at BETWEEN '0001-01-01 00:00:00+00'"
    " AND '9999-12-31 23:59:59.999999+00' THEN created_at END AS created_at"
)
"""``created_at`` as asyncpg's binary decoding can hold it, else NULL: a foreign row's time
outside Python's years 1 to 9999 (PostgreSQL keeps 4713 BC to 294276 AD) is read as unknown,
instead of failing the whole read with asyncpg's ``OverflowError``. The live reads take the text
and report such a row (:func:`_row_stamps`)."""
_COLUMNS = (
    f"path, node_type, content::text AS content, created_by, {_HELD_STAMP}, version, request_id"
)
_LIVE_COLUMNS = (
    "path, node_type, content::text AS content, created_by, created_at::text AS created_at,"
    " version, request_id"
)
"""The columns of a live query's reads (the Initial, a gap's re-select): ``created_at`` as its
text, which :func:`_stamps_of` turns into the datetime asyncpg would have made, for a tenth of
the cost (asyncpg's binary decoding of a ``timestamptz`` took 24 of the 57 ms of client CPU a
50k-row read cost). The read's transaction sets ``DateStyle`` and ``TimeZone`` locally
(:data:`_LIVE_SETTINGS`), so the text is ISO 8601 in UTC whatever the session's settings."""
_LIVE_SETTINGS = "SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'"
"""Transaction-scoped (gone at its end: nothing left on a pooled or a pooler's connection)."""
_WRITE_COLUMNS = (
    "path",
    "node_type",
    "content",
    "created_by",
    "created_at",
    "version",
    "request_id",
)
"""The columns a write fills, in the order of a bulk window's records."""
_MISSING_SCHEMA = (pgexc.UndefinedTableError, pgexc.InvalidSchemaNameError)
_DRIVER_FAULTS = (OSError, pgexc.PostgresError, pgexc.InterfaceError, pgexc.InternalClientError)
_POOLER_REFUSALS = (
    "server login has been failing",  # PgBouncer: its own logins to the server keep failing
    "query_wait_timeout",  # PgBouncer: the query waited for a server connection, none came
)
"""What a connection pooler says when it refuses a client before handing its statement to any
server: the statement never reached PostgreSQL, so nothing was written."""
_PREPARED_STATEMENT_LOST = (
    pgexc.InvalidSQLStatementNameError,  # 26000 prepared statement "..." does not exist
    pgexc.DuplicatePreparedStatementError,  # 42P05 prepared statement "..." already exists
)

_Stage = Literal["connect", "acquire", "query"]
_ASYNCPG_STATEMENT_CACHE_SIZE = 100
"""asyncpg's own default, kept for direct connections."""
_Connection = asyncpg.Connection | PoolConnectionProxy


def quote_identifier(name: str) -> str:
    """Quote ``name`` as a PostgreSQL identifier (double quotes, embedded quotes doubled)."""
    if not name or "\x00" in name:
        raise ValueError(f"not a valid identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def schema_for_partition(partition: str, prefix: str = DEFAULT_SCHEMA_PREFIX) -> str:
    """The (unquoted) schema name of ``partition``: ``prefix + partition``, case kept.

    The partition is validated by the path rules first (``[A-Za-z0-9._-]``, at most 48
    characters, not reserved), so the name fits PostgreSQL's 63-byte identifiers.
    """
    validate_path(partition, allow_reserved=False)
    if "/" in partition:
        raise ValueError(f"{partition!r} is a path, not a partition")
    return prefix + partition


def _dsn_name(dsn: str) -> str:
    """``postgres@host:port/db`` (every host of a multi-host DSN, comma-separated); never the
    password."""
    parsed = urlparse(dsn)
    hosts = parsed.netloc.rpartition("@")[2]
    if "," in hosts:
        shown = ",".join(h if ":" in h.lstrip("[") else f"{h}:5432" for h in hosts.split(","))
    else:
        shown = f"{parsed.hostname or 'localhost'}:{parsed.port or 5432}"
    database = parsed.path.lstrip("/") or parsed.username or "postgres"
    return f"postgres@{shown}/{database}"


def _settings(dsn: str, application_name: str) -> dict[str, str]:
    """The connections' server settings: the DSN's own ``application_name`` wins (an operator
    names the service's connections), else ``application_name``."""
    given = parse_qs(urlparse(dsn).query).get("application_name")
    return {"application_name": given[-1] if given else application_name}


def _session_attrs(given: str | None, dsn: str) -> str | None:
    """What asyncpg is told to connect to: the caller's choice, else the DSN's or the
    environment's (``None`` lets asyncpg read them), else ``"read-write"``.

    The store writes through every connection it opens, so by default a server that cannot
    take writes (a standby, or ``default_transaction_read_only``) is refused when connecting,
    before anything is pooled: otherwise reads would keep answering from a standby after the
    address leads back to the primary. asyncpg decides it from what the server reports at
    login, so a PostgreSQL 14+ costs no round trip.
    """
    if given is not None:
        return given
    if "target_session_attrs" in parse_qs(urlparse(dsn).query) or os.environ.get(
        "PGTARGETSESSIONATTRS"
    ):
        return None
    return "read-write"


def _literal(text: str) -> str:
    """``text`` as a SQL string literal (quotes doubled; the text is a validated identifier)."""
    return "'" + text.replace("'", "''") + "'"


def _is_closed(conn: _Connection) -> bool:
    """Whether ``conn`` is closed; a pool proxy the pool already detached (because its
    connection closed while in use) counts as closed."""
    try:
        return conn.is_closed()
    except pgexc.InterfaceError:
        return True


async def _leave_no_session_state(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing to send.

    asyncpg's default sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;``
    on every release — one round trip per store call. rxmesh leaves no session state on a pooled
    connection (every advisory lock is transaction-scoped, it never SETs, LISTENs or keeps a
    cursor outside a transaction there; the change feed has its own connection), and asyncpg
    still rolls back an open transaction and drops listeners before calling this. Behind a
    transaction pooler the default reset was also harmful: it ran on whatever server connection
    the pooler lent, undoing another client's session state.
    """


def _now() -> datetime:
    return datetime.now(UTC)


_AS_READ: Any = object()
"""(:func:`_node_from_row`: the row's own ``created_at``.)"""


_REPORTED_LIMIT = 4096
_reported: set[tuple[str, str, str]] = set()
"""Row defects already logged, ``(partition, path, what)``: each is logged once per process (up
to :data:`_REPORTED_LIMIT` of them remembered; past that, a defect is logged each time)."""


def _row_defect(partition: str, path: object, what: str, problem: object) -> None:
    """Report, once, that a row of ``partition`` cannot be read as rxmesh reads a node: a row
    another writer put there (or damaged), never the death of the read that met it."""
    key = (partition, str(path), what)
    if key in _reported:
        return
    if len(_reported) < _REPORTED_LIMIT:
        _reported.add(key)
    logger.bind(event="row_defect", partition=partition, path=str(path), defect=what).error(
        "row {!r} of partition '{}' cannot be read as a node ({}: {}): {}",
        path,
        partition,
        what,
        problem,
        "its creation time is read as unknown"
        if what == "created_at"
        else "it is left out of the partition's reads",
    )


def _row_stamps(rows: Sequence[asyncpg.Record], partition: str) -> list[datetime | None]:
    """The ``created_at`` texts of ``rows`` (:data:`_LIVE_COLUMNS`) as :func:`_stamps_of` makes
    them; a time this process cannot hold is ``None``, that row's defect reported."""
    texts = [row[4] for row in rows]
    try:
        return _stamps_of(texts)
    except ValueError:
        pass
    stamps: list[datetime | None] = []
    for row, text in zip(rows, texts, strict=True):
        try:
            stamps.append(_stamp_of(text))
        except ValueError as exc:
            _row_defect(partition, row[0], "created_at", exc)
            stamps.append(None)
    return stamps


def _contents_of(rows: Sequence[asyncpg.Record], partition: str) -> list[Any]:
    """The rows' contents, decoded by ONE ``json.loads`` of the whole chunk; a content this
    process cannot decode (an integer of more digits than Python converts, say) is the defect
    of its row, reported, and :data:`_UNDECODED` in its place."""
    # A jsonb's text is never empty, so ``or`` stands in for a NULL content only.
    try:
        contents: list[Any] = json.loads("[" + ",".join([row[2] or "null" for row in rows]) + "]")
        return contents
    except ValueError:
        pass
    contents = []
    for row in rows:
        try:
            contents.append(json.loads(row[2]) if row[2] is not None else None)
        except ValueError as exc:
            _row_defect(partition, row[0], "content", exc)
            contents.append(_UNDECODED)
    return contents


_UNDECODED: Any = object()
"""(:func:`_contents_of`: a content that could not be decoded.)"""


def _node_from_row(row: asyncpg.Record, created_at: Any = _AS_READ) -> MeshNode:
    """A row as a fully validated :class:`MeshNode` (point reads, and rows that fail the check of
    :func:`_stored_nodes_of`); ``created_at``: the row's creation time, if the row holds its text
    (:data:`_LIVE_COLUMNS`)."""
    content = row["content"]
    return MeshNode(
        path=row["path"],
        node_type=row["node_type"],
        content=json.loads(content) if content is not None else None,
        created_by=row["created_by"],
        created_at=row["created_at"] if created_at is _AS_READ else created_at,
        version=row["version"],
        request_id=row["request_id"],
    )


_parse_iso = datetime.fromisoformat
_INFINITE = {"infinity": datetime.max, "-infinity": datetime.min}
"""What asyncpg's binary decoding makes of an infinite ``timestamptz`` (naive, as it does)."""


def _stamps_of(texts: Iterable[str | None]) -> list[datetime | None]:
    """``created_at`` texts of a live read (ISO 8601, :data:`_LIVE_SETTINGS`) as the datetimes
    asyncpg's binary decoding makes of them: aware, in UTC (``None`` stays ``None``). About 60
    ns a value against asyncpg's 480."""
    texts = list(texts)
    try:
        return [
            None
            if text is None
            else stamp
            if (stamp := _parse_iso(text)).tzinfo is UTC
            else _stamp_of(text)  # another offset (converted), or none at all (refused)
            for text in texts
        ]
    except ValueError:
        return [_stamp_of(text) for text in texts]


def _stamp_of(text: str | None) -> datetime | None:
    """One ``created_at`` text, including what ISO 8601 cannot say: an infinite time as asyncpg
    gives it; a time Python cannot hold (before year 1, after 9999) is refused, as asyncpg
    refuses it, naming the value."""
    if text is None:
        return None
    if text in _INFINITE:
        return _INFINITE[text]
    try:
        stamp = _parse_iso(text)
        if stamp.tzinfo is None:  # never what a timestamptz renders: no time to guess it in
            raise ValueError("no UTC offset")
        return stamp.astimezone(UTC)
    except ValueError as exc:
        raise ValueError(f"created_at {text!r} is not a time this process can hold") from exc


_new_object = object.__new__
_CHANGE_FIELDS = fields_of(NodeChange)
_ANNOUNCED_FIELDS = fields_of(CommitAnnounced)
_STORED_FIELDS_SET = fields_of(MeshNode)
"""The fields set of every node built by :func:`_stored_nodes_of`: one set for all of them (a
frozen model never changes it, and pydantic copies it before a ``model_copy`` updates it), so a
50k-row read makes 50k fewer objects for the garbage collector to walk."""
_VALIDATE_STEP = 2000
"""Paths of a read checked per loop step (about 1 us each)."""
_BUILD_CHUNK = 1000
"""Rows built (or compared) per step of a large read; the loop gets a turn between two steps, so
a 50k-row Initial or gap re-select never holds it for long."""
_FETCH_BATCH = 2000
"""Rows a live query's cursor fetches per round trip (built or compared ``_BUILD_CHUNK`` at a
time): a 50k-row read is 25 round trips (the next one always under way while a batch is built),
and no socket read decodes more than this. Small enough that a batch's records die young: with
5000, a 50k-row Initial spent 24-25 ms in the collector against 19-21 (and ten 55k-row gap
re-selects, streamed, made 3 full passes against none)."""


def _stored_nodes_of(
    rows: Sequence[asyncpg.Record], partition: str, *, stamps_as_text: bool = False
) -> list[MeshNode]:
    """Rows of this store's own table of ``partition`` (``_COLUMNS`` order), built WITHOUT
    pydantic validation.

    Every row of those tables was validated at the write boundary (a :class:`MeshNode` is
    validated when it is made, and the store writes nothing else), so the live-query reads (the
    Initial, the gap re-select, the change feed's row fetch) trust them: well under 1 us a row
    against 5 us validated, the contents decoded by ONE ``json.loads`` of the whole chunk. What
    is kept is the check a foreign or corrupt row fails cheaply: the path must lie in the
    table's partition and the version must be >= 0; a chunk with a row failing it is built row
    by row, that row by :func:`_node_from_row` (full validation, which raises on a corrupt row).
    Point reads (``aread``/``aread_many``, which feed existence checks and grants) always
    validate. ``stamps_as_text``: the rows hold ``created_at`` as text (:data:`_LIVE_COLUMNS`).
    """
    with collector_paused():  # nothing built here can be garbage yet (rxmesh._collector)
        contents = _contents_of(rows, partition)
        stamps: Iterable[datetime | None] = (
            _row_stamps(rows, partition) if stamps_as_text else [row[4] for row in rows]
        )
        head = partition + "/"
        values = [
            {
                "path": path,
                "node_type": node_type,
                "content": content,
                "created_by": created_by,
                "created_at": created_at,
                "version": version,
                "request_id": request_id,
            }
            if version >= 0
            and (path.startswith(head) or path == partition)
            and content is not _UNDECODED
            else None
            for (path, node_type, _, created_by, _, version, request_id), content, created_at in (
                zip(rows, contents, stamps, strict=True)
            )
        ]
        if None in values:  # a foreign or corrupt row: the chunk is built one row at a time
            fields = _STORED_FIELDS_SET
            built = [
                _checked_node(row, at, partition)
                if value is None
                else trusted(MeshNode, value, fields)
                for row, value, at in zip(rows, values, stamps, strict=True)
            ]
            return [node for node in built if node is not None]
        # rxmesh._trusted.trusted, one attribute at a time for the whole chunk: each setter
        # applied by C-level ``map`` (with a Python-level call per row and attribute, the whole
        # build of a 1000-row chunk took 0.65 ms against 0.58, measured).
        count = len(values)
        nodes: list[MeshNode] = list(map(_new_object, repeat(MeshNode, count)))
        _exhaust(map(set_dict, nodes, values))
        _exhaust(map(set_fields_set, nodes, repeat(_STORED_FIELDS_SET, count)))
        _exhaust(map(set_extra, nodes, repeat(None, count)))
        _exhaust(map(set_private, nodes, repeat(None, count)))
        return nodes


def _checked_node(row: asyncpg.Record, created_at: Any, partition: str) -> MeshNode | None:
    """A row that failed the cheap check, fully validated (:func:`_node_from_row`); a row that
    is not a node (a negative version, a path no node may have, content that is not JSON this
    process decodes) is reported, once, and left out: the defect of that row, never of the
    partition's reads."""
    try:
        return _node_from_row(row, created_at)
    except ValueError as exc:  # pydantic's ValidationError, json's JSONDecodeError included
        _row_defect(partition, row[0], "row", exc)
        return None


def _exhaust(calls: Iterable[object]) -> None:
    """Run every call of a lazy ``map`` (its results are all ``None``)."""
    deque(calls, maxlen=0)


def _paths_ascend(rows: Sequence[asyncpg.Record], after: str | None) -> bool:
    """Whether the rows' paths are strictly ascending, and above ``after``."""
    paths = [row[0] for row in rows]
    if after is not None and paths and not after < paths[0]:
        return False
    return strictly_ascending(paths)


async def _read_ahead(
    cursor: asyncpg.cursor.Cursor[asyncpg.Record],
    partition: str,
    each: Callable[[str, list[asyncpg.Record]], Awaitable[None]],
) -> None:
    """Hand ``each`` the cursor's rows batch by batch, the next batch already asked for while
    ``each`` builds this one: the server reads and sends it (on its own core) while this
    process builds, instead of waiting for the build to end (50k rows read through a cursor
    with a build of ~1.2 us a row, measured apart from rxmesh: 175 against 210 ms). A batch
    shorter than :data:`_FETCH_BATCH` is the last one (no round trip for an empty batch).

    The connection runs one command at a time, and only the read-ahead runs on it while
    ``each`` works. If ``each`` raises (or its task is cancelled), the read-ahead is cancelled
    and awaited before the error goes on, so the transaction ends on a connection with no
    command in flight; a failure of the read-ahead itself is added to that error as a note.
    """
    rows = await cursor.fetch(_FETCH_BATCH)
    while rows:
        ahead = (
            asyncio.ensure_future(cursor.fetch(_FETCH_BATCH)) if len(rows) == _FETCH_BATCH else None
        )
        try:
            await each(partition, rows)
        except BaseException as error:
            if ahead is not None:
                ahead.cancel()
                await asyncio.wait([ahead])
                if not ahead.cancelled() and ahead.exception() is not None:
                    error.add_note(f"the read of the next batch failed too: {ahead.exception()!r}")
            raise
        rows = await ahead if ahead is not None else []


def _pooler_refusal(exc: BaseException) -> str | None:
    """The pooler's own refusal in ``exc``'s chain (see :data:`_POOLER_REFUSALS`), or ``None``."""
    for frame in exception_chain(exc):
        text = str(frame)
        if any(phrase in text for phrase in _POOLER_REFUSALS):
            return text
    return None


def _marks_unreachable(error: BaseException) -> bool:
    """Whether taking a pooled connection failed because the store could not be reached (the
    one rule); a pool with every connection busy is no such evidence."""
    return is_transient_connect_fault(error) and not isinstance(error, StorePoolExhaustedError)


def _query_statement(table: str, prefix: str, node_type: str | None) -> tuple[str, list[str]]:
    """The SELECT of a live query's rows, ordered by path, and its arguments: one statement per
    shape of the query, with no condition that a parameter switches off.

    A pooled connection keeps its prepared statements, and after five executions PostgreSQL may
    plan one generically, for any parameters. ``($1 = '' OR path = $1 OR ...)`` was planned, for
    a whole partition, as a scan of the index in path order while its plan was custom (the
    planner saw ``'' = ''``) and as a sequential scan and a sort spilling to disk once generic
    (84 against 44 ms for 60k rows): every Initial and gap re-select of a long-lived pool ran at
    half speed. Each shape here has one plan whatever its parameters.
    """
    conditions: list[str] = []
    args: list[str] = []
    if prefix:
        args.append(prefix)
        conditions.append(f"(path = ${len(args)} OR starts_with(path, ${len(args)} || '/'))")
    if node_type is not None:
        args.append(node_type)
        conditions.append(f"node_type = ${len(args)}")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {_LIVE_COLUMNS} FROM {table}{where} ORDER BY path", args


def _same(a: MeshNode | None, b: MeshNode) -> bool:
    """Whether two rows are equal (their fields; what ``==`` compares, minus its overhead)."""
    return a is not None and (a is b or a.__dict__ == b.__dict__)


def _initial_frame(nodes: list[MeshNode] | PathOrdered, provider: str) -> QueryFrame:
    """``QueryFrame.initial(nodes)``; rows that came strictly ordered by path (the usual case:
    one partition, ``ORDER BY path``) are neither re-sorted nor re-validated one by one, and
    their frame says so (:class:`PathOrdered`: the fan-in and the cache do not check again)."""
    ordered = path_ordered(nodes)
    if ordered is not None:
        return QueryFrame.model_construct(kind=FrameKind.INITIAL, nodes=ordered, provider=provider)
    return QueryFrame.initial(nodes, provider=provider)


class _Reread:
    """One re-select after a gap, shared by the subscriptions of its query, and streamed: each
    batch is handed to every subscription that joined before the first batch came, and is gone
    once each of them has compared it. A 50k-row re-select never holds its 50k records at once,
    and they die young instead of reaching the collector's oldest generation, where each would
    count towards the next full pass over the whole heap (ten 55k-row re-selects beside two
    55k-row snapshots: no full pass, against 5 of 70-90 ms when a re-select kept every batch
    until its end). A changed row is built once for all of them.

    A subscription that comes after the first batch went out cannot join (it would miss rows):
    it starts a re-select of its own. When the last reader leaves (its subscription ended), the
    read is cancelled: nobody is left to answer.
    """

    __slots__ = ("_built", "_readers", "_started", "task")

    def __init__(self) -> None:
        self._built: dict[str, MeshNode] = {}
        self._readers: set[_RereadReader] = set()
        self._started = False
        self.task: asyncio.Task[None] | None = None

    @property
    def joinable(self) -> bool:
        """Whether a subscription joining now would still see every batch."""
        return not self._started

    def join(self) -> _RereadReader:
        """A reader of every batch of this re-select (call :meth:`_RereadReader.leave` at the
        end)."""
        if self._started:
            raise RuntimeError("a re-select cannot be joined once its first batch went out")
        reader = _RereadReader(self)
        self._readers.add(reader)
        return reader

    async def deliver(self, partition: str, rows: list[asyncpg.Record]) -> None:
        """The read's ``each``: hand ``rows`` to every reader (nothing waits)."""
        self._started = True
        for reader in self._readers:
            reader.queue.put_nowait((partition, rows))

    def end(self, error: BaseException | None) -> None:
        """The read ended (``error``: how it failed); every reader is told after its batches."""
        self._started = True
        if not self._readers and not isinstance(error, asyncio.CancelledError | None):
            logger.bind(error_type=type(error).__name__).debug(
                "a gap's re-select failed after its last subscription left: {!r}", error
            )
        for reader in self._readers:
            reader.queue.put_nowait(error)

    def leave(self, reader: _RereadReader) -> None:
        self._readers.discard(reader)
        if not self._readers and self.task is not None and not self.task.done():
            self._started = True  # a subscription coming now reads on its own, never this one
            self.task.cancel()

    def built(self, rows: list[asyncpg.Record], partition: str) -> list[MeshNode]:
        """``rows`` as nodes (the ones another subscription built already are reused)."""
        built = self._built
        missing = [row for row in rows if row[0] not in built]
        built_now = _stored_nodes_of(missing, partition, stamps_as_text=True) if missing else ()
        for node in built_now:
            built[node.path] = node
        return [built[row[0]] for row in rows if row[0] in built]  # (a row defect is left out)


class _RereadReader:
    """One subscription's place in a shared :class:`_Reread`."""

    __slots__ = ("queue", "reread")

    def __init__(self, reread: _Reread) -> None:
        self.reread = reread
        self.queue: asyncio.Queue[tuple[str, list[asyncpg.Record]] | BaseException | None] = (
            asyncio.Queue()
        )

    async def next(self) -> tuple[str, list[asyncpg.Record]] | None:
        """The next ``(partition, rows)`` batch; ``None`` once the read has ended; the read's
        error if it failed."""
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def leave(self) -> None:
        """Stop receiving batches (what was queued for this reader is dropped)."""
        self.reread.leave(self)


class _Changes:
    """What one Delta of a live query will carry, relative to what its observer saw last."""

    __slots__ = ("removed", "upserts")

    def __init__(self) -> None:
        self.upserts: dict[str, MeshNode] = {}
        self.removed: dict[str, None] = {}

    def upsert(self, node: MeshNode) -> None:
        self.removed.pop(node.path, None)
        self.upserts[node.path] = node

    def remove(self, path: str) -> None:
        self.upserts.pop(path, None)
        self.removed[path] = None

    def take(self, provider: str) -> QueryFrame | None:
        """The Delta of everything gathered since the last one (``None``: nothing), emptied."""
        if not self.upserts and not self.removed:
            return None
        frame = QueryFrame.delta(list(self.upserts.values()), list(self.removed), provider=provider)
        self.upserts, self.removed = {}, {}
        return frame


async def _one_transaction(conn: _Connection, statements: str) -> None:
    """``statements`` as ONE READ COMMITTED transaction in ONE round trip: a simple query that
    carries its own ``BEGIN`` and ``COMMIT``. A failure part-way leaves the session in an
    aborted transaction; it is rolled back before the error propagates (unchanged), so the
    connection goes back to the pool clean (no reset query runs there)."""
    try:
        await conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED;\n{statements}\nCOMMIT;")
    except BaseException:
        if not conn.is_closed() and conn.is_in_transaction():
            try:
                await conn.execute("ROLLBACK;")
            except Exception as rollback:  # noqa: BLE001 - the first error is the one raised
                logger.bind(error_type=type(rollback).__name__).debug(
                    "rolling back a failed schema transaction failed too: {}", rollback
                )
        raise


_WRITE_LANES = 2
"""Creates of one partition in flight at once before the next ones go as a group
(:class:`~rxmesh.providers._groups.WriteGroups`)."""


def _path_of(member: tuple[MeshNode, str | None]) -> str:
    return member[0].path


def _size_of(member: tuple[MeshNode, str | None]) -> int:
    """A create's content text, the part of its row that can be large (up to 1 MB)."""
    return 0 if member[1] is None else len(member[1])


def _content_text(node: MeshNode) -> str | None:
    return None if node.content is None else _for_jsonb(json.dumps(node.content))


_EXPONENT_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?e\+\d+')
"""A JSON string (skipped whole), or a number written with a positive exponent."""


def _positional(match: re.Match[str]) -> str:
    token = match.group()
    if token.startswith('"'):
        return token
    digits = format(Decimal(token), "f")  # exact: the same decimal the token denotes
    return digits if "." in digits else digits + ".0"


def _for_jsonb(text: str) -> str:
    """JSON text whose numbers keep their kind through ``jsonb``: a float Python writes with a
    positive exponent (``1e+300``, ``-1.5e+16``) is written out with a fractional part.

    ``jsonb`` keeps a number as ``numeric`` and writes it back without an exponent, so
    ``1e+300`` came back as ``1000...0`` — an ``int`` of 301 digits, not the float that was
    stored (the embedded store keeps the float). ``1000...0.0`` (the same decimal) keeps its
    scale, comes back with it and is read as that float again. Anything else is untouched, and
    text without an ``e+`` (nearly all) is returned as is after one substring search."""
    if "e+" not in text:
        return text
    return _EXPONENT_TOKEN.sub(_positional, text)


_RECORDS_STEP = 250
"""Rows of a bulk window encoded per step; the loop (and the window on the wire) gets a turn
between two steps."""


def _bulk_json_encoder() -> Callable[[object], str]:
    """``json.dumps`` for a bulk window's contents, a third of its cost: ONE C encoder made once
    (``json.dumps`` makes one per call), compact separators (the column is ``jsonb``: the server
    keeps its own form, so only bytes on the wire change). ASCII escapes and NaN are as
    ``json.dumps`` writes them, so the server refuses what it refused before. No circularity
    check: a content is a validated JSON value (a tree)."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python encoder, same output
        return json.JSONEncoder(separators=(",", ":"), check_circular=False).encode

    def refuse(value: object) -> NoReturn:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    chunks = make(None, refuse, json.encoder.encode_basestring_ascii, None, ":", ",", False,
                  False, True)  # fmt: skip

    def encode(value: object) -> str:
        return "".join(chunks(value, 0))

    return encode


_encode_content = _bulk_json_encoder()


async def _window_records(chunk: list[MeshNode]) -> list[tuple[Any, ...]]:
    """The rows of a bulk window as records in :data:`_WRITE_COLUMNS` order, a step at a time
    (each step after a turn of the loop, so the previous window is sent first)."""
    dumps = _encode_content
    records: list[tuple[Any, ...]] = []
    for start in range(0, len(chunk), _RECORDS_STEP):
        await asyncio.sleep(0)
        records.extend(
            (
                n.path,
                n.node_type,
                None if n.content is None else _for_jsonb(dumps(n.content)),
                n.created_by,
                n.created_at,
                max(1, n.version),
                n.request_id,
            )
            for n in chunk[start : start + _RECORDS_STEP]
        )
    return records


class _Outlasted:
    """A change-feed loss that outlasted the store's bound: live queries end with it."""

    __slots__ = ("lost_at", "reason")

    def __init__(self, lost_at: datetime, reason: str) -> None:
        self.lost_at = lost_at
        self.reason = reason


class _Hot:
    """A hot stream with an honest count of its subscribers."""

    def __init__(self) -> None:
        self.subject: Subject[Any] = Subject()

    @property
    def observed(self) -> bool:
        return bool(self.subject.observers)


def _notify_branch(rows: str, op: str, channel: str) -> str:
    """The notify function's part for one transition table: a statement of up to 8 rows (and
    6 kB of paths) is announced from a plain scan of it, a larger one by the windowed aggregate
    (one payload per ~6 kB of rows)."""
    return f"""
                        FOR r IN SELECT path, version FROM {rows} LIMIT 9 LOOP
                            counted := counted + 1;
                            total := total + octet_length(r.path) + 24;
                            EXIT WHEN total > 6000;
                            items := items || CASE WHEN counted = 1 THEN '' ELSE ',' END
                                || json_build_array(r.path, r.version)::text;
                        END LOOP;
                        IF counted <= 8 AND total <= 6000 THEN
                            IF counted > 0 THEN
                                PERFORM pg_notify('{channel}', '[' || to_json(TG_TABLE_SCHEMA)::text
                                    || ',"{op}",[' || items || ']]');
                            END IF;
                            RETURN NULL;
                        END IF;
                        FOR payload IN
                            SELECT json_build_array(TG_TABLE_SCHEMA, '{op}',
                                json_agg(json_build_array(path, version)))::text
                            FROM (SELECT path, version, sum(octet_length(path) + 24)
                                      OVER (ROWS UNBOUNDED PRECEDING) / 6000 AS g
                                  FROM {rows}) AS c
                            GROUP BY g
                        LOOP
                            PERFORM pg_notify('{channel}', payload);
                        END LOOP;"""


@dataclass(frozen=True, slots=True)
class PostgresStoreStatistics:
    """A snapshot of a :class:`PostgresStore` (``store.statistics()``).

    Attributes:
        store: the store's name.
        pooled: whether the pool's DSN goes through a connection pooler (detected at
            ``start()`` when ``pooled=None``; ``None`` before that).
        pooler_evidence: how that was decided (the backend key against the server's pid, or
            "given").
        statement_cache_size: asyncpg's statement cache on the pool's connections (0 when
            pooled: unnamed statements only).
        listen_target: the printable name of the LISTEN connection's DSN.
        target_session_attrs: what the pool's connections are opened with: as given, else
            ``"read-write"``; ``None`` when the DSN or ``PGTARGETSESSIONATTRS`` names one.
        pool_size: connections the pool holds now.
        pool_idle: of those, idle.
        connections_in_use: acquired by rxmesh now.
        feed: the change feed's statistics.
        write_groups: statements that carried creates waiting behind busy lanes (see
            ``group_creates``); 0 when grouping is off.
        grouped_creates: the creates those statements carried.
        shared_connect_failures: operations answered by a concurrent operation's failed
            connection attempt instead of making their own, while the store was unreachable
            (one attempt at a time then; see docs/providers.md).
    """

    store: str
    pooled: bool | None
    pooler_evidence: str | None
    statement_cache_size: int
    listen_target: str
    target_session_attrs: str | None
    pool_size: int
    pool_idle: int
    connections_in_use: int
    feed: ChangeFeedStatistics
    write_groups: int = 0
    grouped_creates: int = 0
    shared_connect_failures: int = 0


class PostgresStore:
    """A :class:`~rxmesh.providers.Store` on PostgreSQL through asyncpg.

    Args:
        dsn: a libpq-style URL (``postgresql://user@host:port/db``).
        name: the printable name; default ``"postgres@host:port/db"`` (never a password).
        min_size: pool minimum size.
        max_size: pool maximum size.
        command_timeout: seconds, set on every connection (a stall then ends).
        connect_timeout: seconds for one connection attempt.
        heartbeat_interval: seconds between two delivery probes of the change feed: a NOTIFY
            sent through the POOL that must arrive on the LISTEN connection.
        heartbeat_timeout: seconds a probe may take, from sending to arrival; past it the feed
            is lost (re-connected, re-LISTENed, verified, then a gap is declared). ``start()``
            waits that long for the first probe and refuses if it never arrives.
        reconnect_backoff: delays between listener re-connect attempts; the last repeats.
        acquire_timeout: seconds to wait for a pool connection (then
            :class:`~rxmesh.exceptions.StorePoolExhaustedError` if the pool was full).
        schema_prefix: prefix of partition schemas (``[a-z][a-z0-9_]{0,14}``); the NOTIFY
            channel is ``<prefix>changes``. Two stores with different prefixes share nothing.
        malformed_log_interval: seconds between two WARNING lines about change-feed payloads
            that do not parse (each is counted and skipped; see :meth:`feed_statistics`).
        clock: monotonic seconds for that rate limit; injectable for tests.
        listen_dsn: where the dedicated LISTEN connection goes (default: ``dsn``). Behind a
            transaction-pooling proxy, ``dsn`` names the proxy and ``listen_dsn`` the primary
            directly (a pooler hands a LISTEN session's server connection to other clients).
        pooled: whether ``dsn`` goes through a connection pooler. ``None`` (the default)
            detects it at ``start()``: one connection asks ``pg_backend_pid()`` and compares it
            with the backend key the connection got (a pooler sends its own key, PostgreSQL
            its pid). ``True``: unnamed statements only (asyncpg's ``statement_cache_size=0``),
            which a transaction pooler cannot break. ``False``: asyncpg's statement cache, no
            detection.
        target_session_attrs: passed to asyncpg for the pool and the listener (one of
            :data:`TARGET_SESSION_ATTRS`); with a multi-host DSN, ``"read-write"`` (or
            ``"primary"``) connects only to the primary, so a standby listed first is skipped.
            Unset (and not in the DSN or ``PGTARGETSESSIONATTRS``): ``"read-write"``, so no
            connection to a standby is ever pooled; ``"any"`` lets reads answer from one.
        group_creates: concurrent creates of one partition that wait behind its busy lanes go
            as one statement (docs/providers.md); ``False``: every create is its own statement
            and transaction, as many in flight as the pool allows.
        feed_loss_bound: seconds the change feed may stay lost (not re-connected, re-LISTENed
            and verified) before every live query of this store ends with a transient
            :class:`~rxmesh.exceptions.StoreError` (08006) saying its view is no longer
            maintained; a live query opened while the loss lasts gets its Initial, then the
            same end. ``reopen_on_transient_fault`` re-opens it: a fresh read. Shorter losses
            end in a declared gap and a re-read instead (docs/live-queries.md).

    Use ``async with PostgresStore(dsn) as store:`` or ``await store.start()`` /
    ``await store.close()``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        name: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 2.0,
        reconnect_backoff: Sequence[float] = DEFAULT_RECONNECT_BACKOFF,
        acquire_timeout: float = 10.0,
        schema_prefix: str = DEFAULT_SCHEMA_PREFIX,
        malformed_log_interval: float = DEFAULT_MALFORMED_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        listen_dsn: str | None = None,
        pooled: bool | None = None,
        target_session_attrs: str | None = None,
        group_creates: bool = True,
        feed_loss_bound: float = DEFAULT_FEED_LOSS_BOUND,
    ) -> None:
        if not _PREFIX_RULE.fullmatch(schema_prefix):
            raise ValueError(f"schema_prefix {schema_prefix!r} must match {_PREFIX_RULE.pattern}")
        if not reconnect_backoff:
            raise ValueError("reconnect_backoff must not be empty")
        if not 0 < feed_loss_bound < float("inf"):
            raise ValueError(f"feed_loss_bound must be a positive number, not {feed_loss_bound!r}")
        if target_session_attrs is not None and target_session_attrs not in TARGET_SESSION_ATTRS:
            raise ValueError(
                f"target_session_attrs {target_session_attrs!r} must be one of "
                f"{sorted(TARGET_SESSION_ATTRS)}"
            )
        self._dsn = dsn
        self._listen_dsn = listen_dsn or dsn
        self._listen_name = _dsn_name(self._listen_dsn)
        self._pooled_option = pooled
        self._pooled: bool | None = pooled
        self._pooler_evidence: str | None = None if pooled is None else "given"
        self._target_session_attrs = _session_attrs(target_session_attrs, dsn)
        self._listen_session_attrs = _session_attrs(target_session_attrs, self._listen_dsn)
        self._name = name or _dsn_name(dsn)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._connect_timeout = connect_timeout
        self._heartbeat_interval = heartbeat_interval
        self._heartbeat_timeout = heartbeat_timeout
        self._backoff = tuple(reconnect_backoff)
        self._acquire_timeout = acquire_timeout
        self._prefix = schema_prefix
        self._channel = schema_prefix + "changes"
        self._pool: asyncpg.Pool | None = None
        self._in_use = 0
        self._ensured: set[str] = set()
        self._groups: WriteGroups[str, tuple[MeshNode, str | None]] | None = (
            WriteGroups(self._write_group, _path_of, lanes=_WRITE_LANES, size_of=_size_of)
            if group_creates
            else None
        )
        self._closing = False
        self._attempts = SharedAttempts()
        self._changes = _Hot()
        self._gaps = _Hot()
        self._answers = _Hot()
        self._listen_conn: _Connection | None = None
        self._listen_lock = asyncio.Lock()
        self._lost = asyncio.Event()
        self._notifications: asyncio.Queue[object] = asyncio.Queue()
        self._tasks: dict[Role, asyncio.Task[None]] = {}
        self._reselects: dict[NodeQuery, tuple[int, _Reread]] = {}
        """The running re-select of each query after a gap, with the gap count when it began."""
        self._feed = FeedBook(
            self._name,
            self._channel,
            malformed_log_interval,
            clock,
            stale_after=2 * heartbeat_interval + heartbeat_timeout,
        )
        self._probe_marker = probe_marker(schema_prefix)
        self._probe_instance = secrets.token_hex(8)
        self._probe_seq = 0
        self._probe_waiters: dict[str, asyncio.Future[float]] = {}
        self._pool_down: tuple[datetime, str] | None = None
        """Since when, and why, a probe could not be sent through the pool (until one arrives)."""
        self._held: tuple[datetime, str] | None = None
        """Evidence held back while the pool did not answer: since when, and why."""
        self._loss_bound = feed_loss_bound
        self._loss_timer: asyncio.TimerHandle | None = None
        self._outlasted: _Outlasted | None = None
        """The current loss, once it outlasted the bound (live queries then end)."""
        self._expired = _Hot()
        self._start_evidence: ChangeFeedGap | None = None
        """The verified start, offered to every subscriber of ``answers_again`` while the store
        still answers (see :attr:`answers_again`)."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def name(self) -> str:
        """``postgres@host:port/db`` unless given."""
        return self._name

    @property
    def schema_prefix(self) -> str:
        """The prefix of this store's partition schemas."""
        return self._prefix

    @property
    def feed_backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (``None`` while it is down)."""
        conn = self._listen_conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    def schema_of(self, partition: str) -> str:
        """The unquoted schema name of ``partition`` in this store."""
        return schema_for_partition(partition, self._prefix)

    @property
    def pooled(self) -> bool | None:
        """Whether the pool's DSN goes through a connection pooler (given, or detected at
        :meth:`start`; ``None`` before a detecting start)."""
        return self._pooled

    def statistics(self) -> PostgresStoreStatistics:
        """The store's set-up and pool, and its change feed's statistics, as a frozen snapshot."""
        pool = self._pool
        return PostgresStoreStatistics(
            store=self._name,
            pooled=self._pooled,
            pooler_evidence=self._pooler_evidence,
            statement_cache_size=self._statement_cache_size(self._pooled),
            listen_target=self._listen_name,
            target_session_attrs=self._target_session_attrs,
            pool_size=0 if pool is None else pool.get_size(),
            pool_idle=0 if pool is None else pool.get_idle_size(),
            connections_in_use=self._in_use,
            feed=self._feed.snapshot(),
            write_groups=0 if self._groups is None else self._groups.groups_sent,
            grouped_creates=0 if self._groups is None else self._groups.members_sent,
            shared_connect_failures=self._attempts.shared,
        )

    @staticmethod
    def _statement_cache_size(pooled: bool | None) -> int:
        return 0 if pooled else _ASYNCPG_STATEMENT_CACHE_SIZE

    def _connect_options(self, *, pooled: bool | None, listener: bool = False) -> dict[str, Any]:
        """asyncpg options every connection of this store gets (pool, listener, detection)."""
        options: dict[str, Any] = {
            "command_timeout": self._command_timeout,
            "statement_cache_size": self._statement_cache_size(pooled),
        }
        attrs = self._listen_session_attrs if listener else self._target_session_attrs
        if attrs is not None:
            options["target_session_attrs"] = attrs
        return options

    async def start(self) -> None:
        """Open the pool and the dedicated LISTEN connection, and verify the change feed end to
        end: a probe NOTIFY sent through the pool must reach the listener within
        ``heartbeat_timeout`` (the first LISTEN declares no gap).

        With ``pooled=None`` it first detects whether ``dsn`` goes through a pooler.

        Raises:
            StoreError: the database could not be reached (mapped; see the module docstring).
            ChangeFeedUnverifiedError: the probe was sent but never arrived: notifications sent
                through the pool do not reach the LISTEN connection (a transaction-pooling
                proxy or a standby?); the message says how to fix it. Nothing stays open.
        """
        if self._pool is not None:
            return
        self._closing = False
        self._start_evidence = self._pool_down = self._held = None
        began = _now()
        if self._pooled_option is None:
            self._pooled, self._pooler_evidence = await self._detect_pooler()
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                timeout=self._connect_timeout,
                server_settings=_settings(self._dsn, "rxmesh"),
                reset=_leave_no_session_state,
                **self._connect_options(pooled=self._pooled),
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation="opening the pool", stage="connect")
        self._pool = pool
        try:
            await self._open_listener()
            problem = await self._verify_delivery()
            if problem is not None:
                raise self._unverified(problem)
        except BaseException as exc:
            self._drop_listener()
            self._pool = None
            await self._close_pool(pool)
            if isinstance(exc, ChangeFeedUnverifiedError):
                self._feed.state = ChangeFeedState.UNVERIFIED
                self._feed.loss = (_now(), str(exc))
            raise
        self._feed.state = ChangeFeedState.LISTENING
        self._feed.loss = None
        self._spawn("dispatch", self._dispatch())
        self._spawn("listener", self._watch_feed())
        # Whatever was recorded before this process started (a journal loaded from disk) has
        # waited for exactly this: the pool answered and a probe sent through it arrived.
        self._start_evidence = ChangeFeedGap(
            source=self._name,
            lost_at=began,
            resumed_at=_now(),
            reason="the store started: its pool answered and a probe sent through it arrived "
            "on the LISTEN connection",
        )
        self._publish(self._answers, self._start_evidence, "answers_again")

    async def _detect_pooler(self) -> tuple[bool, str]:
        """Whether ``dsn`` reaches PostgreSQL through a connection pooler, and the evidence.

        A PostgreSQL backend sends its own pid as the connection's backend key; a pooler
        (PgBouncer, RDS Proxy, Supavisor, Odyssey, pgcat) sends a key of its own, since the
        client is not bound to one server process. One connection (unnamed statements only,
        safe either way) compares the key with ``pg_backend_pid()``. A plain TCP proxy forwards
        the server's key and is rightly not a pooler.
        """
        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=self._connect_timeout,
                server_settings=_settings(self._dsn, "rxmesh"),
                **self._connect_options(pooled=True),
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation="connecting", stage="connect")
        try:
            backend_pid = await conn.fetchval("SELECT pg_backend_pid()")
        except (TimeoutError, *_DRIVER_FAULTS) as exc:
            conn.terminate()
            self._raise_at_boundary(
                exc,
                operation="connecting",
                stage="query",
                connection=conn,
                connection_usable=False,
            )
        except BaseException:
            conn.terminate()
            raise
        key = conn.get_server_pid()
        try:
            async with asyncio.timeout(self._command_timeout):
                await conn.close()
        except (TimeoutError, *_DRIVER_FAULTS):
            conn.terminate()
        if key == backend_pid:
            return False, f"the backend key is the server's pid {backend_pid}: a direct connection"
        evidence = (
            f"the backend key {key} is not the pid {backend_pid} of the server process that "
            "answered: a connection pooler is in between"
        )
        logger.bind(store=self._name, pooled=True).info(
            "store '{}': {}; statements are unnamed (statement_cache_size=0)", self._name, evidence
        )
        return True, evidence

    def _unverified(self, problem: str) -> ChangeFeedUnverifiedError:
        if self._pooled:
            why = (
                f"the pool's DSN goes through a connection pooler ({self._pooler_evidence}), "
                "and the LISTEN connection goes there too"
                if self._listen_dsn == self._dsn
                else "the pool's DSN goes through a connection pooler, and the LISTEN "
                f"connection ({self._listen_name}) does not see its commits"
            )
        else:
            why = "a transaction-pooling proxy or a standby between rxmesh and the primary?"
        return ChangeFeedUnverifiedError(
            f"store '{self._name}': notifications sent through the pool never reach the LISTEN "
            f"connection ({problem}): {why}. A transaction pooler (PgBouncer, RDS Proxy, "
            "Supavisor) hands the LISTEN session's server connection to other clients, so the "
            "change feed would be silently dead. Pass listen_dsn= a direct connection to the "
            "primary (the pool may stay on the pooler).",
            store=self._name,
            pooled=self._pooled,
            listen_target=self._listen_name,
        )

    async def close(self) -> None:
        """Stop the change feed, close the pool, and complete the hot streams.

        It always closes everything, whatever state the feed's tasks ended in: their errors are
        logged at ERROR (once), never raised from here. Idempotent. If the task calling
        ``close()`` is cancelled meanwhile, the connections are still terminated and the
        cancellation propagates.
        """
        self._closing = True
        self._feed.state = ChangeFeedState.CLOSED
        self._start_evidence = self._pool_down = self._held = None
        self._forget_loss_bound()
        tasks = list(self._tasks.items())
        self._tasks.clear()
        pool, self._pool = self._pool, None
        reselects = [reread.task for _, reread in self._reselects.values() if reread.task]
        self._reselects.clear()
        try:
            for reselect in reselects:  # their subscribers are told by the completion below
                reselect.cancel()
            for _, task in tasks:
                task.cancel()
            self._drop_listener()
            if tasks:
                # asyncio.wait never raises a task's error; a stuck task cannot hold close().
                _, stuck = await asyncio.wait(
                    [task for _, task in tasks], timeout=self._command_timeout
                )
                for role, task in tasks:
                    self._report_at_close(role, task, stuck=task in stuck)
            if pool is not None:
                await self._close_pool(pool)
        finally:
            self._drop_listener()
            if pool is not None and not pool.is_closing():
                pool.terminate()  # close() itself was cancelled before the pool's turn
            self._feed.report_held(force=True)
            for hot in (self._changes, self._gaps, self._answers):
                hot.subject.on_completed()

    def _report_at_close(self, role: str, task: asyncio.Task[None], *, stuck: bool) -> None:
        """Log what a feed task ended with, unless it was reported already (a task that died
        while the store was open was reported, and replaced, when it died)."""
        log = logger.bind(store=self._name, task=role)
        if stuck:
            log.error(
                "store '{}' change feed {} task did not stop within {:g}s of close(); "
                "its connection was terminated",
                self._name,
                role,
                self._command_timeout,
            )
        elif not task.cancelled() and (error := task.exception()) is not None:
            log.bind(error_type=type(error).__name__).opt(exception=error).error(
                "store '{}' change feed {} task had died: {}: {}",
                self._name,
                role,
                type(error).__name__,
                error,
            )

    async def _close_pool(self, pool: asyncpg.Pool) -> None:
        try:
            async with asyncio.timeout(self._command_timeout):
                await pool.close()
        except (TimeoutError, *_DRIVER_FAULTS) as exc:
            logger.bind(store=self._name, error_type=type(exc).__name__).warning(
                "store '{}': the pool did not close cleanly ({!r}); terminating it",
                self._name,
                exc,
            )
            pool.terminate()

    async def __aenter__(self) -> PostgresStore:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ the boundary

    def _raise_at_boundary(
        self,
        exc: BaseException,
        *,
        operation: str,
        stage: _Stage,
        connection: _Connection | None = None,
        connection_usable: bool | None = None,
        in_recovery: bool | None = None,
    ) -> NoReturn:
        """THE mapping of asyncpg/network failures to rxmesh errors, most specific first.

        ``stage`` is where it happened: ``connect`` (opening a connection), ``acquire`` (waiting
        for a pool connection, which may include connecting) or ``query`` (on a connection).
        ``in_recovery``: for a 25006, whether the server said it is a standby.
        """
        where = f"store '{self._name}'"
        if isinstance(exc, StoreError):
            raise exc
        if isinstance(exc, pgexc.ReadOnlySQLTransactionError):
            # 25006 on a statement rxmesh sent: rxmesh never opens a read-only transaction, so
            # the server it reached cannot take writes -- a standby (a failover in progress, or
            # a DSN naming a standby) or a primary put in read-only mode. The statement was
            # refused before it ran: not evaluated, nothing written, an availability failure.
            # Not a verdict on the request: re-issuing it to the primary is meaningful.
            server = (
                "is a standby in recovery (pg_is_in_recovery() is true): a failover in "
                "progress, or the DSN names a standby"
                if in_recovery
                else "refuses writes (a standby, or default_transaction_read_only is on)"
            )
            # Never pooled again: a connection that reached a standby stays on it (the pool's
            # idle recycling does not replace it), so every later write through it would meet
            # the same refusal after the address leads back to the primary. The next acquire
            # connects anew, through the address as it leads now.
            if connection is not None and not _is_closed(connection):
                connection.terminate()
            raise StoreError(
                f"{where} could not take the write while {operation}: the server it reached "
                f"{server}; nothing ran. Writes need the primary: point the DSN at it, or list "
                "every host and pass target_session_attrs='read-write'",
                sqlstate="08000",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, _PREPARED_STATEMENT_LOST):
            # 26000 / 42P05 from asyncpg's OWN named statements (rxmesh names none): something
            # between rxmesh and the server moved the session (a transaction pooler, or a
            # DISCARD ALL run by a session pooler), so a statement prepared on one server
            # connection is missing (or clashes) on the next. The statement did not run: the
            # store could not evaluate the request. That is no verdict on it; a fresh connection
            # may carry it, so drop this one (its statement cache is wrong).
            if connection is not None and not _is_closed(connection):
                connection.terminate()
            raise StoreError(
                f"{where} could not evaluate the statement while {operation}: asyncpg's "
                f"prepared statement was missing or clashed on the server connection "
                f"({exc.sqlstate}: {exc}); nothing ran. A connection pooler moves sessions "
                "between server connections: pass pooled=True (or leave pooled=None to detect "
                "it) so statements stay unnamed",
                sqlstate="08000",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, pgexc.PostgresError | pgexc.InterfaceError) and (
            refusal := _pooler_refusal(exc)
        ):
            # asyncpg reports it as the connection closing mid-call (08003), which would leave
            # the outcome unknown; but the pooler said no server was reached.
            if connection is not None and not _is_closed(connection):
                connection.terminate()
            raise StoreError(
                f"{where} unreachable while {operation}: the connection pooler refused before "
                f"any server was reached ({refusal}); nothing ran",
                sqlstate="08001",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, pgexc.PostgresError):
            # PostgresError already carries its sqlstate (CDNE 08003, 57P01, 53300, 42P01, ...).
            raise exc
        if isinstance(exc, pgexc.TargetServerAttributeNotMatched):
            # No host of the DSN is what target_session_attrs asks for (say, no primary yet
            # while a standby is being promoted): the store could not be reached.
            raise StoreError(
                f"{where} unreachable while {operation}: no host of the DSN matches "
                f"target_session_attrs={self._target_session_attrs!r} (a standby, a read-only "
                f"server, or a failover in progress?): {exc}",
                sqlstate="08001",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, pgexc.InterfaceError):
            cdne = isinstance(exc.__context__, pgexc.ConnectionDoesNotExistError)
            closed = connection is not None and _is_closed(connection)
            if cdne or closed:
                detail = (
                    "the connection died during the call; the statement MAY have run"
                    if cdne
                    else "the connection was already closed; the statement was never sent"
                )
                raise StoreError(
                    f"{where} lost its connection while {operation}: {detail}",
                    sqlstate="08006",
                    store=self._name,
                    transient=True,
                    may_have_run=cdne,
                ) from exc
            raise exc  # API misuse or a closing pool: a defect, surfaced unchanged
        if isinstance(exc, pgexc.InternalClientError) and stage != "connect":
            # A pooled connection whose backend was just terminated is handed out while asyncpg is
            # still consuming the FATAL: the call is refused before anything is sent. The
            # connection is unusable; drop it so the retry gets a fresh one.
            if connection is not None and not _is_closed(connection):
                connection.terminate()
            raise StoreError(
                f"{where} lost its connection while {operation}: the connection was in a broken "
                "protocol state (its backend had just gone); the statement was never sent",
                sqlstate="08006",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, TimeoutError):
            if stage == "acquire" and self._in_use >= self._max_size:
                raise StorePoolExhaustedError(
                    f"this process's connection pool for {where} had no free connection within "
                    f"{self._acquire_timeout:g}s ({self._in_use}/{self._max_size} in use) while "
                    f"{operation}; the database was not reached",
                    sqlstate=None,
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            if stage in ("connect", "acquire"):
                raise StoreError(
                    f"{where} unreachable while {operation}: no connection within "
                    f"{self._connect_timeout:g}s",
                    sqlstate="08001",
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            # A time-box rxmesh itself set (command_timeout, a per-call timeout) fired: the
            # store did not answer in time. That is the seeds' connect-timeout shape -- a DB frame
            # around the TimeoutError, which the one rule calls unreachable -- whether the server
            # was slow or THIS process stalled (the box is wall-clock and runs on while the loop
            # is blocked). Only a server-sent 57014 (statement_timeout, a cancel from another
            # session) is a refused query; it is a PostgresError and passed through above.
            state = (
                "the query was cancelled and the connection stayed usable"
                if connection_usable
                else "the connection was dropped"
            )
            raise StoreError(
                f"{where} did not answer in time while {operation}: no reply within "
                f"{self._command_timeout:g}s (the time box rxmesh set, command_timeout; {state})",
                sqlstate=None,
                store=self._name,
                transient=True,
                may_have_run=None,
            ) from exc
        if isinstance(exc, OSError):
            if stage in ("connect", "acquire"):
                raise StoreError(
                    f"{where} unreachable while {operation}: {exc}",
                    sqlstate="08001",
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            raise StoreError(
                f"{where} lost its connection while {operation}: {exc}",
                sqlstate="08006",
                store=self._name,
                transient=True,
                may_have_run=None,
            ) from exc
        raise exc

    async def _usable_after_timeout(self, conn: _Connection) -> bool:
        """After a query timeout: is the connection still answering? If not, terminate it."""
        if _is_closed(conn):
            return False
        try:
            async with asyncio.timeout(min(1.0, self._command_timeout)):
                await conn.fetchval("SELECT 1")
        except (TimeoutError, *_DRIVER_FAULTS):
            if not _is_closed(conn):
                conn.terminate()
            return False
        return True

    async def _in_recovery(self, conn: _Connection) -> bool | None:
        """After a 25006: does the server say it is a standby? ``None`` if it cannot say."""
        if _is_closed(conn):
            return None
        try:
            async with asyncio.timeout(min(1.0, self._command_timeout)):
                answer = await conn.fetchval("SELECT pg_is_in_recovery()")
        except (TimeoutError, *_DRIVER_FAULTS):
            return None
        return bool(answer)

    async def _run(self, operation: str, work: Callable[[_Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; every failure crosses the boundary once."""
        pool = self._pool
        if pool is None:
            raise RuntimeError(f"PostgresStore '{self._name}' is not started (await start())")
        conn = await self._attempts.attempt(
            functools.partial(self._acquire, pool, operation),
            unreachable=_marks_unreachable,
            answer=functools.partial(self._answer_shared, operation),
        )
        self._in_use += 1
        try:
            try:
                return await work(conn)
            except TimeoutError as exc:
                usable = await self._usable_after_timeout(conn)
                self._raise_at_boundary(
                    exc,
                    operation=operation,
                    stage="query",
                    connection=conn,
                    connection_usable=usable,
                )
            except pgexc.ReadOnlySQLTransactionError as exc:
                standby = await self._in_recovery(conn)
                self._raise_at_boundary(
                    exc, operation=operation, stage="query", connection=conn, in_recovery=standby
                )
            except _DRIVER_FAULTS as exc:
                self._raise_at_boundary(exc, operation=operation, stage="query", connection=conn)
        finally:
            self._in_use -= 1
            await self._release(pool, conn, operation)

    async def _acquire(self, pool: asyncpg.Pool, operation: str) -> PoolConnectionProxy[Any]:
        """A pooled connection for ``operation``; a failure crosses the boundary once."""
        try:
            return await pool.acquire(timeout=self._acquire_timeout)
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation=operation, stage="acquire")

    def _answer_shared(self, operation: str, failure: BaseException) -> NoReturn:
        """Raise ``operation``'s own error for a concurrent operation's connection attempt that
        found the store unreachable (:class:`~rxmesh.providers._attempts.SharedAttempts`): the
        error its own attempt would have raised, built from the same driver fault."""
        note = (
            "no connection attempt of its own: the store was already unreachable, and a "
            "concurrent operation's attempt, in flight when this one began, failed so"
        )
        cause = failure.__cause__
        own: BaseException | None = None
        if (
            isinstance(failure, StoreError)
            and isinstance(cause, _DRIVER_FAULTS)
            and not isinstance(cause, StoreError)
        ):
            try:
                self._raise_at_boundary(cause, operation=operation, stage="acquire")
            except Exception as error:  # noqa: BLE001 - it always raises; kept if it is this one's
                own = error
        if own is None or own is cause or not _marks_unreachable(own):
            own = StoreError(
                f"store '{self._name}' unreachable while {operation}: {failure}",
                sqlstate=getattr(failure, "sqlstate", None) or "08001",
                store=self._name,
                transient=True,
                may_have_run=False,
            )
            own.__cause__ = failure
        own.add_note(note)
        try:
            raise own
        finally:  # this frame is in the error's traceback: hold none of them (no cycle)
            del own, failure, cause

    async def _release(
        self, pool: asyncpg.Pool, conn: PoolConnectionProxy[Any], operation: str
    ) -> None:
        """Give ``conn`` back. A connection that cannot be reset (its backend died after the
        work ended) is discarded by asyncpg itself; that must not replace the work's own result
        or error, so it is reported here, not raised."""
        try:
            await pool.release(conn)
        except _DRIVER_FAULTS as exc:
            if not _is_closed(conn):
                conn.terminate()
            logger.bind(store=self._name, error_type=type(exc).__name__).warning(
                "store '{}': a connection could not be returned to the pool after {} ({}: {}); "
                "it was discarded",
                self._name,
                operation,
                type(exc).__name__,
                exc,
            )

    # ------------------------------------------------------------------ schema

    def _table(self, partition: str) -> str:
        return quote_identifier(self.schema_of(partition)) + ".nodes"

    async def _ensure_schema(self, conn: _Connection, partition: str) -> None:
        """Create ``partition``'s schema, table and triggers if needed: race-safe across
        processes, and pooler-safe (no session state: every lock is transaction-scoped).

        Concurrent creators are serialised by ``pg_advisory_xact_lock`` on the schema's name, in
        TWO short READ COMMITTED transactions, each ONE round trip (a simple query carrying its
        own ``BEGIN`` and ``COMMIT``; a transaction pooler keeps each on one server connection,
        and the lock ends with it: nothing can be left held on a server connection the pooler
        hands to someone else):

        1. lock; create the schema unless a catalog QUERY finds it. Not ``CREATE SCHEMA IF NOT
           EXISTS``: its existence check reads the backend's catalog cache, which an advisory
           lock does not refresh, so a waiter that had cached "no such schema" (a read before
           the partition existed) would miss the schema its predecessor committed while it
           waited and fail with 23505 on pg_namespace. A query takes a fresh snapshot.
        2. lock again; create the table, function and triggers. This transaction began after
           the schema was committed, so its catalog cache sees it (a new transaction processes
           the pending invalidations); ``CREATE TABLE`` locks the schema, which refreshes the
           cache again after any wait, so the function and triggers are found if a predecessor
           made them meanwhile.
        """
        schema = self.schema_of(partition)
        s = quote_identifier(schema)
        lock = f"SELECT pg_advisory_xact_lock(hashtext({_literal(schema)}));"
        # READ COMMITTED whatever the server's default: the catalog query must see what the
        # predecessor committed while this transaction waited for the lock.
        await _one_transaction(
            conn,
            f"""{lock}
                DO $rxmesh$ BEGIN
                    IF NOT EXISTS (
                        SELECT FROM pg_catalog.pg_namespace WHERE nspname = {_literal(schema)}
                    ) THEN
                        CREATE SCHEMA {s};
                    END IF;
                END $rxmesh$;""",
        )
        await _one_transaction(conn, self._schema_sql(s, lock))
        self._ensured.add(partition)

    def _schema_sql(self, s: str, lock: str) -> str:
        """The table, the notify function and its triggers of schema ``s``, after ``lock``."""
        channel = self._channel.replace("'", "''")
        return f"""{lock}
                CREATE TABLE IF NOT EXISTS {s}.nodes (
                    path text PRIMARY KEY,
                    node_type text,
                    content jsonb,
                    created_by text,
                    created_at timestamptz,
                    version bigint NOT NULL DEFAULT 0,
                    request_id text
                );
                CREATE OR REPLACE FUNCTION {s}.rxmesh_notify() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    payload text;
                    items text := '';
                    counted int := 0;
                    total int := 0;
                    r record;
                BEGIN
                    -- One NOTIFY per ~6 kB of changed rows: [schema, op, [[path, version], ...]]
                    -- (paths are <= 512 ASCII bytes, so a payload stays under the 8000 limit).
                    -- A statement of a few rows (every single-node write) is read by a plain
                    -- scan of the transition table: the aggregate below is planned on every
                    -- statement (a query over a transition table keeps no plan), which cost a
                    -- single-row INSERT a fifth of its rate. More rows: the aggregate.
                    IF TG_OP = 'DELETE' THEN
{_notify_branch("old_rows", "delete", channel)}
                    ELSE
{_notify_branch("new_rows", "upsert", channel)}
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                CREATE OR REPLACE TRIGGER rxmesh_notify_insert AFTER INSERT ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_update AFTER UPDATE ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_delete AFTER DELETE ON {s}.nodes
                    REFERENCING OLD TABLE AS old_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                """

    async def _with_schema(
        self,
        conn: _Connection,
        partition: str,
        work: Callable[[], Awaitable[T]],
    ) -> T:
        """Run a write that needs ``partition``'s table, creating it lazily (once, race-safe)."""
        if partition not in self._ensured:
            await self._ensure_schema(conn, partition)
        try:
            return await work()
        except _MISSING_SCHEMA:
            # Dropped behind our back since we created it: create again, try once more.
            self._ensured.discard(partition)
            await self._ensure_schema(conn, partition)
            return await work()

    async def _partitions(self, conn: _Connection) -> list[str]:
        rows = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
            self._prefix,
        )
        return [row["nspname"][len(self._prefix) :] for row in rows]

    # ------------------------------------------------------------------ reads

    def read(self, path: str) -> Observable[MeshNode | None]:
        """The node at ``path``; ``None`` for a clean absence (also: no such partition)."""
        return from_async(lambda: self.aread(path))

    async def aread(self, path: str) -> MeshNode | None:
        """:meth:`read`, awaited."""
        validate_path(path)
        table = self._table(partition_of(path))

        async def work(conn: _Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", path)
            except _MISSING_SCHEMA:
                return None  # the partition does not exist yet: a clean absence
            return None if row is None else _node_from_row(row)

        return await self._run(f"reading '{path}'", work)

    def read_many(self, paths: Sequence[str]) -> Observable[dict[str, MeshNode]]:
        """The nodes present among ``paths``, one query per partition."""
        return from_async(lambda: self.aread_many(paths))

    async def aread_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        """:meth:`read_many`, awaited."""
        for start in range(0, len(paths), _VALIDATE_STEP):
            if start:
                await asyncio.sleep(0)  # a 10,000-path read never holds the loop to check them
            for path in paths[start : start + _VALIDATE_STEP]:
                validate_path(path)
        if not paths:
            return {}
        first = partition_of(paths[0])
        under = first + "/"
        by_partition: dict[str, list[str]] = {}
        if all(path.startswith(under) or path == first for path in paths):
            by_partition[first] = list(paths)  # the usual read: one partition's paths
        else:
            for path in paths:
                by_partition.setdefault(partition_of(path), []).append(path)

        async def work(conn: _Connection) -> dict[str, MeshNode]:
            found: dict[str, MeshNode] = {}
            for partition, wanted in by_partition.items():
                try:
                    rows = await conn.fetch(
                        f"SELECT {_COLUMNS} FROM {self._table(partition)} "
                        "WHERE path = ANY($1::text[])",
                        wanted,
                    )
                except _MISSING_SCHEMA:
                    continue
                for row in rows:
                    node = _node_from_row(row)
                    found[node.path] = node
            return found

        return await self._run(f"reading {len(paths)} path(s)", work)

    # ------------------------------------------------------------------ writes

    def write(self, node: MeshNode) -> Observable[MeshNode]:
        """Insert ``node`` (version ``max(1, node.version)``) if its path is free.

        A row already there with the same request id is an ambiguous commit that landed: it is
        emitted as if written now. Another request's row is a StoreConflictError.
        """
        return from_async(lambda: self.awrite(node))

    async def awrite(self, node: MeshNode) -> MeshNode:
        """:meth:`write`, awaited."""
        validate_path(node.path)
        partition = node.partition
        table = self._table(partition)

        # The row as written is the node as sent (the INSERT stores exactly these values), so
        # only the path comes back: no row is decoded and re-validated on the hot path.
        written = node if node.version >= 1 else node.model_copy(update={"version": 1})
        content = _content_text(node)

        async def insert(conn: _Connection) -> asyncpg.Record | None:
            return await conn.fetchrow(
                f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
                " request_id) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)"
                " ON CONFLICT (path) DO NOTHING RETURNING path",
                node.path,
                node.node_type,
                content,
                node.created_by,
                node.created_at,
                max(1, node.version),
                node.request_id,
            )

        async def work(conn: _Connection) -> MeshNode:
            row = await self._with_schema(conn, partition, lambda: insert(conn))
            if row is not None:
                return written
            return await decide(conn)

        async def decide(conn: _Connection) -> MeshNode:
            """The INSERT wrote nothing: the row there says what the write's outcome is."""
            existing = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
            )
            if existing is None:  # deleted between the two statements: try once more
                row = await insert(conn)
                if row is not None:
                    return written
                existing = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
                )
            if existing is not None and (
                node.request_id is not None and existing["request_id"] == node.request_id
            ):
                return _node_from_row(existing)  # an ambiguous commit that did land
            raise StoreConflictError(
                f"store '{self._name}': a node already exists at '{node.path}'",
                path=node.path,
                existing_request_id=None if existing is None else existing["request_id"],
                store=self._name,
            )

        groups = self._groups
        if groups is None:
            return await self._run(f"writing '{node.path}'", work)
        if groups.enter(partition):
            try:
                return await self._run(f"writing '{node.path}'", work)
            finally:
                groups.leave(partition)
        landed = await groups.join(partition, (node, content))
        if landed:
            return written
        # Taken: the row there decides. Refused whole (None): this write alone, from the start.
        return await self._run(f"writing '{node.path}'", work if landed is None else decide)

    async def _write_group(
        self, partition: str, members: list[tuple[MeshNode, str | None]]
    ) -> set[str] | None:
        """Concurrent creates of one partition (:class:`WriteGroups`) in ONE statement, its own
        transaction: the paths that landed. The rest were taken; each of those members decides
        its outcome alone.

        ``None``: the server evaluated the statement and refused it (a row it cannot store, say
        a content with ``NaN``, which ``jsonb`` refuses): nothing was written, and each member
        is written alone, so the refusal is the answer of the member it concerns only. Anything
        else is raised: every member's outcome (a fault the one rule calls unreachable or no
        answer in time, and anything that is not the server's refusal).

        The rows go in path order, so two groups in flight in one partition take their rows'
        locks in one order and cannot deadlock each other.
        """
        table = self._table(partition)
        members = sorted(members, key=_path_of)
        nodes = [node for node, _ in members]
        columns = (
            [n.path for n in nodes],
            [n.node_type for n in nodes],
            [content for _, content in members],
            [n.created_by for n in nodes],
            [n.created_at for n in nodes],
            [max(1, n.version) for n in nodes],
            [n.request_id for n in nodes],
        )

        async def insert(conn: _Connection) -> list[asyncpg.Record]:
            return await conn.fetch(
                f"INSERT INTO {table} ({', '.join(_WRITE_COLUMNS)})"
                " SELECT p, t, c::jsonb, b, a, v, r FROM unnest($1::text[], $2::text[],"
                " $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[])"
                " AS u(p, t, c, b, a, v, r) ON CONFLICT (path) DO NOTHING RETURNING path",
                *columns,
            )

        async def work(conn: _Connection) -> set[str]:
            rows = await self._with_schema(conn, partition, lambda: insert(conn))
            return {row[0] for row in rows}

        first = nodes[0].path
        try:
            return await self._run(
                f"writing '{first}' with {len(nodes) - 1} other concurrent create(s) of "
                f"partition '{partition}' in one statement",
                work,
            )
        except pgexc.PostgresError as exc:
            if is_transient_connect_fault(exc) or is_no_answer_in_time(exc):
                raise
            logger.bind(partition=partition, sqlstate=exc.sqlstate, rows=len(nodes)).debug(
                "a group of creates was refused whole ({}: {}); writing its members one by one",
                type(exc).__name__,
                exc,
            )
            return None

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """Insert in windows of at most ``window`` rows per partition, one transaction each.

        A window is first sent as ONE binary ``COPY`` into the partition's table, in its own
        transaction: when no path of it is taken, every row lands at COPY's cost. When one is
        (a unique violation: the row of an earlier write, of a concurrent writer, or a path twice
        in the window), that transaction rolls back whole and the window is sent again as ONE
        ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING path``, which lands
        the free paths and skips the taken ones; the later windows of that partition go straight
        to it. Either way a window is one transaction, and a row is never overwritten. Never
        ``executemany`` (cancelling a streaming executemany hangs asyncpg); no session state
        (nothing outlives the window's transaction, so it works behind a transaction pooler).
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        batch = list(nodes)

        def subscribe(
            observer: abc.ObserverBase[WindowCommitted],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            async def run() -> None:
                if batch:
                    await self._write_windows(batch, window, observer.on_next)
                observer.on_completed()

            return from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)

        return Observable(subscribe)

    async def _write_windows(
        self, nodes: list[MeshNode], window: int, emit: Callable[[WindowCommitted], None]
    ) -> None:
        by_partition: dict[str, list[MeshNode]] = {}
        for node in nodes:  # paths were validated when the MeshNode was built
            by_partition.setdefault(partition_of(node.path), []).append(node)
        windows = [
            (partition, index, members[start : start + window])
            for partition, members in by_partition.items()
            for index, start in enumerate(range(0, len(members), window))
        ]

        async def work(conn: _Connection) -> None:
            # One pooled connection for the whole batch; every window is its own transaction,
            # committed and reported before the next one is sent. The rows of the next window
            # are encoded while this one is on the server (its COPY, trigger and commit), so the
            # client's work and the server's overlap, as two processes on two cores do.
            conflicts: set[str] = set()  # partitions where a window met a taken path
            records = await _window_records(windows[0][2])
            for position, (partition, index, chunk) in enumerate(windows):
                sending = asyncio.ensure_future(
                    self._with_schema(
                        conn,
                        partition,
                        functools.partial(
                            self._insert_window, conn, partition, chunk, records, conflicts
                        ),
                    )
                )
                try:
                    if position + 1 < len(windows):
                        records = await _window_records(windows[position + 1][2])
                    landed = await sending
                except BaseException:
                    if not sending.done():  # cancelled while encoding: the window goes too
                        sending.cancel()
                        await asyncio.wait([sending])
                    raise
                emit(WindowCommitted(partition=partition, index=index, paths=landed))

        await self._run(f"writing {len(nodes)} node(s) in windows of {window}", work)

    async def _insert_window(
        self,
        conn: _Connection,
        partition: str,
        chunk: list[MeshNode],
        records: list[tuple[Any, ...]],
        conflicts: set[str],
    ) -> tuple[str, ...]:
        """Write one window in one transaction; the paths that landed, in window order."""
        schema = self.schema_of(partition)
        try:
            if partition not in conflicts:
                try:  # one statement outside a transaction block: its own transaction
                    await conn.copy_records_to_table(
                        "nodes",
                        schema_name=schema,
                        records=records,
                        columns=_WRITE_COLUMNS,
                        timeout=self._command_timeout,
                    )
                except pgexc.UniqueViolationError:
                    conflicts.add(partition)  # rolled back whole: decide row by row below
                else:
                    return tuple(n.path for n in chunk)
            rows = await conn.fetch(
                f"INSERT INTO {quote_identifier(schema)}.nodes ({', '.join(_WRITE_COLUMNS)})"
                " SELECT p, t, c::jsonb, b, a, v, r FROM unnest($1::text[], $2::text[],"
                " $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[])"
                " AS u(p, t, c, b, a, v, r) ON CONFLICT (path) DO NOTHING RETURNING path",
                *(list(column) for column in zip(*records, strict=True)),
                timeout=self._command_timeout,
            )
        except asyncio.CancelledError:
            if not _is_closed(conn):
                conn.terminate()  # never reuse a connection whose bulk call was cancelled
            raise
        landed = {row["path"] for row in rows}
        return tuple(n.path for n in chunk if n.path in landed)

    # Update, delete and move are compare-and-set when given a basis (``expected_version`` and,
    # optionally, ``expected_request_id``: the id of the write that produced that version). The
    # condition is in the statement's WHERE, so it holds at the row lock; when no row matched, one
    # read of the row says why (absent, this request's own landed write, or a conflict).

    @staticmethod
    def _own_write(row: asyncpg.Record, request_id: str, expected_version: int | None) -> bool:
        """Whether ``row`` is what an update or move with ``request_id`` wrote (an earlier try):
        the version after its basis (without one, never version 1, which a create writes)."""
        if row["request_id"] != request_id:
            return False
        if expected_version is not None:
            return bool(row["version"] == expected_version + 1)
        return bool(row["version"] > 1)

    def _version_conflict(
        self, path: str, expected_version: int, row: asyncpg.Record | None
    ) -> StoreVersionConflictError:
        now = (
            "gone"
            if row is None
            else (f"at version {row['version']} (request {row['request_id']!r})")
        )
        return StoreVersionConflictError(
            f"compare-and-set refused at '{path}' in store '{self._name}': the request was based "
            f"on version {expected_version}, the row is {now}; another write came first",
            path=path,
            expected_version=expected_version,
            actual_version=None if row is None else row["version"],
            actual_request_id=None if row is None else row["request_id"],
            store=self._name,
        )

    def update(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> Observable[MeshNode | None]:
        """Replace type and content of an existing node, version + 1; ``None`` if absent.

        ``request_id`` (when given) becomes the row's; a row already carrying it is returned
        unchanged (this request's update landed). With ``expected_version``: a compare-and-set
        (:class:`StoreVersionConflictError` when another write came first).
        """
        return from_async(
            lambda: self.aupdate(node, expected_version, expected_request_id, request_id)
        )

    async def aupdate(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """:meth:`update`, awaited."""
        validate_path(node.path)
        table = self._table(node.partition)

        async def work(conn: _Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(
                    f"UPDATE {table} SET node_type = $2, content = $3::jsonb,"
                    " version = version + 1, request_id = COALESCE($6::text, request_id)"
                    " WHERE path = $1 AND ($4::bigint IS NULL OR version = $4)"
                    " AND ($5::text IS NULL OR request_id = $5)"
                    # Its own landed update (same id, a version only an update writes) is not
                    # applied again; a create's row with the same id is.
                    " AND ($6::text IS NULL OR $4::bigint IS NOT NULL"
                    " OR request_id IS DISTINCT FROM $6 OR version = 1)"
                    f" RETURNING {_COLUMNS}",
                    node.path,
                    node.node_type,
                    _content_text(node),
                    expected_version,
                    expected_request_id,
                    request_id,
                )
                if row is not None:
                    return _node_from_row(row)
                if expected_version is None and request_id is None:
                    return None
                current = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
                )
            except _MISSING_SCHEMA:
                return None
            if current is None:
                return None
            if request_id is not None and self._own_write(current, request_id, expected_version):
                return _node_from_row(current)  # this request's update did land
            assert expected_version is not None  # else the UPDATE matched the row
            raise self._version_conflict(node.path, expected_version, current)

        return await self._run(f"updating '{node.path}'", work)

    def delete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> Observable[bool]:
        """Delete the node at ``path`` (not its children); ``False`` if absent. With
        ``expected_version``: a compare-and-set, as for :meth:`update`."""
        return from_async(lambda: self.adelete(path, expected_version, expected_request_id))

    async def adelete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> bool:
        """:meth:`delete`, awaited."""
        validate_path(path)
        table = self._table(partition_of(path))

        async def work(conn: _Connection) -> bool:
            try:
                row = await conn.fetchrow(
                    f"DELETE FROM {table} WHERE path = $1"
                    " AND ($2::bigint IS NULL OR version = $2)"
                    " AND ($3::text IS NULL OR request_id = $3) RETURNING path",
                    path,
                    expected_version,
                    expected_request_id,
                )
                if row is not None:
                    return True
                if expected_version is None:
                    return False
                current = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", path
                )
            except _MISSING_SCHEMA:
                return False
            if current is None:
                return False
            raise self._version_conflict(path, expected_version, current)

        return await self._run(f"deleting '{path}'", work)

    def move(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> Observable[MeshNode | None]:
        """Move a node to a free path in one transaction; ``None`` if ``source`` is absent.

        ``request_id`` (when given) becomes the moved row's; a target carrying it with the source
        gone is this request's landed move, returned. With ``expected_version`` the source is
        compared-and-set, as for :meth:`update`.
        """
        return from_async(
            lambda: self.amove(source, target, expected_version, expected_request_id, request_id)
        )

    async def amove(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """:meth:`move`, awaited."""
        validate_path(source)
        validate_path(target)
        source_table = self._table(partition_of(source))
        target_partition = partition_of(target)
        target_table = self._table(target_partition)

        async def landed(conn: _Connection) -> MeshNode | None:
            """The target row, if this request's move put it there (the source being gone)."""
            if request_id is None:
                return None
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {target_table} WHERE path = $1", target
            )
            if row is None or not self._own_write(row, request_id, expected_version):
                return None
            return _node_from_row(row)

        async def work(conn: _Connection) -> MeshNode | None:
            if target_partition not in self._ensured:
                await self._ensure_schema(conn, target_partition)
            async with conn.transaction():
                try:
                    row = await conn.fetchrow(
                        f"DELETE FROM {source_table} WHERE path = $1"
                        " AND ($2::bigint IS NULL OR version = $2)"
                        " AND ($3::text IS NULL OR request_id = $3)"
                        f" RETURNING {_COLUMNS}",
                        source,
                        expected_version,
                        expected_request_id,
                    )
                    if row is None:
                        current = await conn.fetchrow(
                            f"SELECT {_COLUMNS} FROM {source_table} WHERE path = $1", source
                        )
                except _MISSING_SCHEMA:
                    return None
                if row is None:
                    if current is None:
                        return await landed(conn)
                    assert expected_version is not None  # else the DELETE matched the row
                    raise self._version_conflict(source, expected_version, current)
                if source == target:  # taken, by the node itself: refused (rolled back), as the
                    raise StoreConflictError(  # embedded store refuses it
                        f"store '{self._name}': cannot move '{source}' onto itself: "
                        "a node already exists there",
                        path=target,
                        existing_request_id=row["request_id"],
                        store=self._name,
                    )
                moved = await conn.fetchrow(
                    f"INSERT INTO {target_table} (path, node_type, content, created_by,"
                    " created_at, version, request_id) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)"
                    f" ON CONFLICT (path) DO NOTHING RETURNING {_COLUMNS}",
                    target,
                    row["node_type"],
                    row["content"],
                    row["created_by"],
                    row["created_at"],
                    row["version"] + 1,
                    request_id if request_id is not None else row["request_id"],
                )
                if moved is None:
                    existing = await conn.fetchval(
                        f"SELECT request_id FROM {target_table} WHERE path = $1", target
                    )
                    raise StoreConflictError(
                        f"store '{self._name}': cannot move '{source}' to '{target}': "
                        "a node already exists there",
                        path=target,
                        existing_request_id=existing,
                        store=self._name,
                    )
                return _node_from_row(moved)

        try:
            return await self._run(f"moving '{source}' to '{target}'", work)
        except _MISSING_SCHEMA:
            self._ensured.discard(target_partition)
            raise

    # ------------------------------------------------------------------ queries

    async def _select(self, query: NodeQuery) -> list[MeshNode] | PathOrdered:
        """The nodes matching ``query``, ordered by path: built batch by batch as the rows come,
        so a batch's records are gone before the next arrives (a 50k-row read never holds 50k
        records beside the nodes, and no single read of the socket decodes them all). They come
        as a :class:`PathOrdered` when the rows came strictly ordered by path (checked on the
        records as they come: one pass less over the nodes), else as the list to sort."""
        nodes: list[MeshNode] = []
        ascending = True

        async def build(partition: str, rows: list[asyncpg.Record]) -> None:
            nonlocal ascending
            for start in range(0, len(rows), _BUILD_CHUNK):
                await asyncio.sleep(0)
                chunk = rows[start : start + _BUILD_CHUNK]
                if ascending:
                    ascending = _paths_ascend(chunk, nodes[-1].path if nodes else None)
                nodes.extend(_stored_nodes_of(chunk, partition, stamps_as_text=True))

        await self._select_batches(query, build)
        return PathOrdered.of_sorted(nodes) if ascending else nodes

    async def _select_batches(
        self, query: NodeQuery, each: Callable[[str, list[asyncpg.Record]], Awaitable[None]]
    ) -> None:
        """Hand ``each`` the rows matching ``query`` in :data:`_FETCH_BATCH`-row batches, ordered
        by path, through a cursor per partition (one transaction, one snapshot, each)."""
        prefix = query.path_prefix.rstrip("/")
        wanted: list[str] | None = None
        if query.partition is not None:
            wanted = [query.partition]
        if prefix:
            head = partition_of(prefix)
            if wanted is not None and head not in wanted:
                return
            wanted = [head]
        for partition in wanted or ():
            validate_path(partition, allow_reserved=False)

        async def work(conn: _Connection) -> None:
            partitions = wanted if wanted is not None else await self._partitions(conn)
            for partition in partitions:
                try:
                    async with conn.transaction():  # a cursor lives in a transaction
                        await conn.execute(_LIVE_SETTINGS)
                        sql, args = _query_statement(
                            self._table(partition), prefix, query.node_type
                        )
                        cursor = await conn.cursor(sql, *args)
                        await _read_ahead(cursor, partition, each)
                except _MISSING_SCHEMA:
                    continue

        await self._run(f"querying {query!r}", work)

    def _reselect(self, query: NodeQuery, gap: int) -> _RereadReader:
        """A reader of the re-select of ``query`` after gap number ``gap``, shared by every
        subscription of this store: one that started after that gap was declared serves them
        all, if it has not handed out a batch yet."""
        running = self._reselects.get(query)
        if running is not None and running[0] >= gap and running[1].joinable:
            return running[1].join()
        reread = _Reread()
        reader = reread.join()
        entry = (self._feed.gaps, reread)
        self._reselects[query] = entry
        task = reread.task = asyncio.ensure_future(self._reread(query, reread))

        def forget(_: asyncio.Future[None]) -> None:
            if self._reselects.get(query) is entry:
                del self._reselects[query]

        task.add_done_callback(forget)
        return reader

    async def _reread(self, query: NodeQuery, reread: _Reread) -> None:
        """Read ``query`` again into ``reread``; its readers get the batches and the end (or
        the error, which each of them raises: none is dropped while a reader is left, and the
        read is cancelled once none is)."""
        try:
            await self._reselect_rows(query, reread.deliver)
        except asyncio.CancelledError as cancelled:
            reread.end(cancelled)
            raise
        except Exception as error:  # noqa: BLE001 - handed to every reader, which raises it
            reread.end(error)
        else:
            reread.end(None)

    async def _reselect_rows(
        self, query: NodeQuery, each: Callable[[str, list[asyncpg.Record]], Awaitable[None]]
    ) -> None:
        """A gap's re-select of ``query``: its rows to ``each``, batch by batch, in path order."""
        await self._select_batches(query, each)

    def query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """One Initial frame, then a Delta per batch of matching committed changes.

        Changes that arrive together (the rows of one notification batch, or whatever is queued
        when the query's task gets its turn) make ONE Delta, so a 1000-row bulk is a handful of
        frames, not 1000, and nothing waits for company. After a declared change-feed gap the
        query re-runs (one re-select per query and gap, shared by every subscription of this
        store) and emits the difference as one Delta (nothing if nothing changed). Changes that
        arrive while a (re-)query runs are applied after it, de-duplicated by value.
        """

        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            events: asyncio.Queue[NodeChange | int | _Outlasted | None] = asyncio.Queue()
            subscriptions = CompositeDisposable(
                self._changes.subject.subscribe(
                    events.put_nowait, on_completed=lambda: events.put_nowait(None)
                ),
                # A gap is queued as its number (counted before it is published).
                self._gaps.subject.subscribe(lambda _: events.put_nowait(self._feed.gaps)),
                self._expired.subject.subscribe(events.put_nowait),
            )

            async def run() -> None:
                outlasted = self._outlasted
                # Opened during a loss past the bound: its Initial is fresh, and it gets the
                # bound from now (a standing watch re-reads once per bound, not per backoff).
                later = (
                    None
                    if outlasted is None
                    else asyncio.get_running_loop().call_later(
                        self._loss_bound, events.put_nowait, outlasted
                    )
                )
                try:
                    await follow()
                finally:
                    if later is not None:
                        later.cancel()

            async def follow() -> None:
                nodes = await self._select(query)
                observer.on_next(_initial_frame(nodes, self._name))
                # The subscriber's turn first: this query's index of its rows (a pass over all
                # of them, 5 ms at 50k) is its own bookkeeping, needed at the first change.
                await asyncio.sleep(0)
                known = {node.path: node for node in nodes}
                del nodes
                pending = _Changes()
                while (event := await events.get()) is not None:
                    while True:
                        if isinstance(event, _Outlasted):
                            if event is self._outlasted:  # else the feed came back meanwhile
                                if frame := pending.take(self._name):
                                    observer.on_next(frame)  # what the feed did deliver
                                raise self._stale_error(event)
                        elif isinstance(event, int):
                            if frame := pending.take(self._name):
                                observer.on_next(frame)  # what came before the gap, at once
                            # Shared: one subscription leaving never cancels the others' read.
                            reader = self._reselect(query, event)
                            try:
                                await self._diff(known, reader, pending)
                            finally:
                                reader.leave()
                        else:
                            self._apply(known, query, event, pending)
                        if events.empty():
                            break
                        event = events.get_nowait()
                        if event is None:
                            break
                    if frame := pending.take(self._name):
                        observer.on_next(frame)
                    if event is None:
                        break
                observer.on_completed()

            worker = from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)

            return CompositeDisposable(worker, subscriptions)

        return Observable(subscribe)

    @staticmethod
    def _apply(
        known: dict[str, MeshNode], query: NodeQuery, change: NodeChange, pending: _Changes
    ) -> None:
        node = change.node
        if change.op == "delete" or (node is not None and not query.matches(node)):
            if known.pop(change.path, None) is not None:
                pending.remove(change.path)
            return
        if node is None or _same(known.get(node.path), node):
            return
        known[node.path] = node
        pending.upsert(node)

    @staticmethod
    async def _diff(
        known: dict[str, MeshNode], reader: _RereadReader, pending: _Changes
    ) -> None:
        """Gather into ``pending`` how the re-read rows differ from ``known``, and make them
        ``known``, batch by batch as they come; :data:`_BUILD_CHUNK` rows a loop turn (it may be
        a whole 50k-row snapshot). A batch is let go once compared.

        Only the rows that changed are built: a row whose version, type, creator, creation time
        and request id equal the known node's is the same row state (every change rxmesh makes
        bumps the version, and a path deleted and created again has a new request and creation
        time), so its content is not even decoded.
        """
        seen: set[str] = set()
        reread = reader.reread
        stale: list[asyncpg.Record] = []
        chunk: list[asyncpg.Record] = []
        while (batch := await reader.next()) is not None:
            partition, rows = batch
            del batch  # (nothing here holds a batch while the next is awaited)
            for start in range(0, len(rows), _BUILD_CHUNK):
                await asyncio.sleep(0)
                stale = []
                chunk = rows[start : start + _BUILD_CHUNK]
                for row, created_at in zip(chunk, _row_stamps(chunk, partition), strict=True):
                    path = row[0]
                    seen.add(path)
                    old = known.get(path)
                    if (
                        old is None
                        or old.version != row[5]
                        or old.request_id != row[6]
                        or old.created_at != created_at
                        or old.node_type != row[1]
                        or old.created_by != row[3]
                    ):
                        stale.append(row)
                for node in reread.built(stale, partition):
                    if not _same(known.get(node.path), node):
                        known[node.path] = node
                        pending.upsert(node)
            del rows
            stale = chunk = []
        if len(known) == len(seen):  # every known path was re-read: nothing was removed
            return
        paths = list(known)
        gone: list[str] = []
        for start in range(0, len(paths), _BUILD_CHUNK * 10):
            await asyncio.sleep(0)
            gone.extend(p for p in paths[start : start + _BUILD_CHUNK * 10] if p not in seen)
        for path in sorted(gone):
            del known[path]
            pending.remove(path)

    # ------------------------------------------------------------------ the change feed

    @property
    def changes(self) -> Observable[NodeChange]:
        """Committed changes (every NOTIFY, with the row fetched for upserts)."""
        return self._changes.subject

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """Declared gaps: the listener was lost, re-connected and re-LISTENed."""
        return self._gaps.subject

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Evidence that the store answers: gaps declared, commits announced (one per NOTIFY),
        and the verified start.

        Evidence counts only when the write path answers: while the pool does not (a probe
        could not be sent through it, or operations found the store unreachable through it)
        nothing is published, even if the listener, on its own route, hears other processes'
        commits; once a probe sent through the pool arrives again, ONE
        :class:`~rxmesh.model.ChangeFeedGap` on this stream (not on :attr:`gaps`: the changes
        themselves were delivered) says so, for what was held back and what was recorded
        meanwhile.

        The verified start (``start()`` connected, LISTENed, and a probe sent through the pool
        arrived) is a ``ChangeFeedGap`` on this stream too: published at ``start()``, and
        given at once to each later subscriber while the feed is listening and the pool
        answers, so intents loaded from a journal are re-issued on this process's own evidence,
        not on another process's next commit.
        """

        def subscribe(
            observer: abc.ObserverBase[StoreEvidence],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            subscription = self._answers.subject.subscribe(observer, scheduler=scheduler)
            standing = self._start_evidence
            if (
                standing is not None
                and not self._closing
                and self._feed.state is ChangeFeedState.LISTENING
                and self._feed.loss is None
                and not self._evidence_held()
            ):
                observer.on_next(standing)
            return subscription

        return Observable(subscribe)

    def _evidence_held(self) -> bool:
        """Whether the pool is known not to answer (evidence then waits for it)."""
        return self._pool_down is not None or self._attempts.down

    def _offer_evidence(self, evidence: StoreEvidence) -> None:
        """Publish ``evidence`` on ``answers_again``, or hold it while the pool does not answer:
        a re-issue spent on a route known to be down is a write lost."""
        if not self._evidence_held():
            self._publish(self._answers, evidence, "answers_again")
            return
        if self._held is None:
            why = (
                self._pool_down[1]
                if self._pool_down is not None
                else "operations found the store unreachable through the pool"
            )
            self._held = (_now(), why)
            logger.bind(store=self._name, evidence=type(evidence).__name__).info(
                "store '{}': evidence that it answers ({}) held back: {}; it counts once a "
                "probe sent through the pool arrives",
                self._name,
                type(evidence).__name__,
                why,
            )

    def _pool_answered(self) -> None:
        """A probe sent through the pool arrived: the write path answers. If it was known down,
        or evidence was held back meanwhile, say so once on ``answers_again``."""
        self._attempts.reached()
        down, self._pool_down = self._pool_down, None
        held, self._held = self._held, None
        since = min((mark for mark in (down, held) if mark is not None), default=None)
        if since is None or self._closing:
            return
        lost_at, why = since
        evidence = ChangeFeedGap(
            source=self._name,
            lost_at=lost_at,
            resumed_at=_now(),
            reason=f"the pool answers again ({why})",
        )
        logger.bind(store=self._name).info(
            "store '{}': a probe sent through the pool arrived again after {:.3f}s ({}); that "
            "is evidence it answers",
            self._name,
            (evidence.resumed_at - lost_at).total_seconds(),
            why,
        )
        self._publish(self._answers, evidence, "answers_again")

    @property
    def feed_is_whole(self) -> bool:
        """Whether the change feed is listening now (what ``feed_statistics().state`` says,
        without building the snapshot: the mesh asks before trusting facts it kept), and no
        announced commit is held back from ``answers_again`` (its subscribers, the kept facts
        among them, have not seen it yet)."""
        return self._feed.state is ChangeFeedState.LISTENING and self._held is None

    def feed_statistics(self) -> ChangeFeedStatistics:
        """The change feed's state and counters, as a frozen snapshot.

        ``rxmesh.health.ChangeFeedCheck(store)`` turns it into a health entry.
        """
        snapshot = self._feed.snapshot()
        if self._held is None:
            return snapshot
        since, why = self._held
        return replace(snapshot, evidence_held_since=since, evidence_held_reason=why)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """asyncpg's listener callback: count and queue the payload; parsing happens later,
        one payload at a time, so nothing a NOTIFY carries can fail here.

        A delivery probe (a payload that begins like one) is answered here, at once, so its
        round trip is not the dispatcher's queue; one that does not parse as a probe is queued
        like any other payload (and counted malformed there)."""
        if isinstance(payload, str) and payload.startswith(self._probe_marker):
            try:
                token = parse_probe(payload, self._prefix)
            except MalformedNotificationError:
                pass
            else:
                waiter = self._probe_waiters.pop(token, None)
                if waiter is None:
                    self._feed.foreign_probes += 1  # another instance's (or a late one of ours)
                elif not waiter.done():
                    waiter.set_result(time.perf_counter())
                return
        self._feed.notifications += 1
        self._notifications.put_nowait(payload)

    def _on_terminated(self, conn: object) -> None:
        if conn is self._listen_conn:
            self._lost.set()

    async def _open_listener(self) -> None:
        # The listener shares the pool's statement cache setting when it shares its DSN.
        pooled = self._pooled if self._listen_dsn == self._dsn else False
        try:
            conn = await asyncpg.connect(
                self._listen_dsn,
                timeout=self._connect_timeout,
                server_settings=_settings(self._listen_dsn, "rxmesh-feed"),
                **self._connect_options(pooled=pooled, listener=True),
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation="opening the change feed", stage="connect")
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except pgexc.ReadOnlySQLTransactionError as exc:  # LISTEN on a standby
            standby = await self._in_recovery(conn)
            conn.terminate()
            self._raise_at_boundary(
                exc, operation="listening to the change feed", stage="query", in_recovery=standby
            )
        except _DRIVER_FAULTS as exc:
            conn.terminate()
            self._raise_at_boundary(
                exc, operation="listening to the change feed", stage="query", connection=conn
            )
        except BaseException:
            conn.terminate()  # cancelled (close()) between connect and LISTEN: never leak it
            raise
        conn.add_termination_listener(self._on_terminated)
        self._lost.clear()
        self._listen_conn = conn

    def _drop_listener(self) -> None:
        """Forget the LISTEN connection and terminate it (never ``close()``: it may be stalled)."""
        conn, self._listen_conn = self._listen_conn, None
        if conn is not None and not _is_closed(conn):
            conn.terminate()

    # -- who keeps the feed alive: every feed task is watched; one that ends while the store is
    # open means the feed is LOST (logged, shown by health), restarted, and a gap declared.

    def _spawn(self, role: Role, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"{self._name} change feed {role}")
        self._tasks[role] = task
        task.add_done_callback(functools.partial(self._on_feed_task_done, role))

    def _on_feed_task_done(self, role: Role, task: asyncio.Task[None]) -> None:
        """A feed task ended. While the store is open that is a loss: report it and recover."""
        if self._closing or self._tasks.get(role) is not task:
            return  # close() stopped it, and reports what it has not seen reported
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            reason = f"its {role} task was cancelled from outside the store"
        elif error is None:
            reason = f"its {role} task ended unexpectedly"
        else:
            reason = f"its {role} task died: {type(error).__name__}: {error}"
        self._feed_lost(reason)
        log = logger.bind(store=self._name, task=role, reason=reason).opt(exception=error)
        if task.cancelled():
            # Someone else's decision (often a loop shutting down): do not fight it, say it.
            del self._tasks[role]
            self._feed.stopped = True
            log.error(
                "store '{}' change feed lost: {}; it stays down until the store is closed",
                self._name,
                reason,
            )
            return
        delay_index = self._feed.consecutive_restarts
        self._feed.consecutive_restarts += 1
        self._feed.restarts += 1
        log.error("store '{}' change feed lost: {}; restarting it", self._name, reason)
        if role == "dispatch":
            delay = self._backoff[min(delay_index, len(self._backoff) - 1)]
            self._spawn("dispatch", self._dispatch(restart_after=delay))
        else:
            self._drop_listener()
            self._spawn("listener", self._watch_feed(reconnect_from=delay_index))

    def _feed_lost(self, reason: str) -> None:
        """Record a loss of the change feed; the first of a run starts the live queries' bound."""
        self._feed.lost(_now(), reason)
        if self._loss_timer is None and self._outlasted is None and not self._closing:
            self._loss_timer = asyncio.get_running_loop().call_later(
                self._loss_bound, self._loss_outlasted
            )

    def _loss_outlasted(self) -> None:
        """The loss lasted ``feed_loss_bound``: no live query of this store is maintained any
        more, so each ends (a transient error) rather than go on silently stale."""
        self._loss_timer = None
        loss = self._feed.loss
        if loss is None or self._closing:
            return
        self._outlasted = outlasted = _Outlasted(*loss)
        logger.bind(store=self._name, reason=loss[1]).error(
            "store '{}' change feed lost for more than {:g}s ({}); its live queries end with a "
            "transient error (re-opening reads them afresh)",
            self._name,
            self._loss_bound,
            loss[1],
        )
        self._publish(self._expired, outlasted, "live queries")

    def _forget_loss_bound(self) -> None:
        timer, self._loss_timer = self._loss_timer, None
        if timer is not None:
            timer.cancel()
        self._outlasted = None

    def _stale_error(self, outlasted: _Outlasted) -> StoreError:
        """One live query's own error for ``outlasted`` (never one object raised in many)."""
        return StoreError(
            f"store '{self._name}': its change feed has been lost since "
            f"{outlasted.lost_at:%Y-%m-%dT%H:%M:%SZ}, longer than {self._loss_bound:g}s "
            f"(feed_loss_bound): {outlasted.reason}. This live query's view is no longer "
            "maintained; open it again to read it afresh (reopen_on_transient_fault does)",
            sqlstate="08006",
            store=self._name,
            transient=True,
        )

    def _feed_is_whole(self) -> bool:
        conn = self._listen_conn
        return (
            conn is not None
            and not _is_closed(conn)
            and all(
                (task := self._tasks.get(role)) is not None and not task.done()
                for role in ("dispatch", "listener")
            )
        )

    def _resume_if_recovered(self) -> None:
        """Declare the gap of the current loss once the feed is whole again (listening AND
        dispatching), never while the store is still away."""
        loss = self._feed.loss
        if loss is None or self._closing or not self._feed_is_whole():
            return
        lost_at, reason = loss
        gap = ChangeFeedGap(source=self._name, lost_at=lost_at, resumed_at=_now(), reason=reason)
        self._feed.resumed()
        self._forget_loss_bound()
        logger.bind(store=self._name, reason=reason).warning(
            "store '{}' change feed resumed after {:.3f}s; declaring a gap",
            self._name,
            (gap.resumed_at - gap.lost_at).total_seconds(),
        )
        self._publish(self._gaps, gap, "gaps")
        self._offer_evidence(gap)

    def _publish(self, hot: _Hot, value: object, stream: str) -> None:
        """``on_next`` to each subscriber on its own: one subscriber that raises is reported
        (ERROR, rate-limited) and the others, live queries included, still get the value."""
        subject = hot.subject
        if subject.is_disposed or subject.is_stopped:
            return
        with subject.lock:
            observers = subject.observers.copy()
        for observer in observers:
            try:
                observer.on_next(value)
            except Exception as exc:  # noqa: BLE001 - reported; the other subscribers go on
                self._feed.subscriber_error(stream, exc)

    # -- the listener

    async def _watch_feed(self, *, reconnect_from: int | None = None) -> None:
        """Heartbeat the listener; on loss re-connect with backoff, re-LISTEN, declare a gap.

        ``reconnect_from``: this task replaces one that died (the loss is recorded already), so
        it re-connects first, starting at that step of the backoff.
        """
        while not self._closing:
            if reconnect_from is None:
                reason = await self._heartbeat_until_lost()
                self._feed_lost(reason)
                self._drop_listener()
                logger.bind(store=self._name, reason=reason).error(
                    "store '{}' change feed lost: {}; re-connecting", self._name, reason
                )
            await self._reconnect_listener(reconnect_from or 0)
            reconnect_from = None
            self._resume_if_recovered()

    async def _reconnect_listener(self, attempt: int) -> None:
        """Re-connect and re-LISTEN with backoff until a probe sent through the pool arrives:
        only a VERIFIED feed is whole again (the caller then declares the gap)."""
        while True:
            await asyncio.sleep(self._backoff[min(attempt, len(self._backoff) - 1)])
            attempt += 1
            conn = self._listen_conn
            if conn is None or _is_closed(conn):
                try:
                    await self._open_listener()
                except (StoreError, *_DRIVER_FAULTS) as exc:
                    logger.bind(store=self._name, attempt=attempt).error(
                        "store '{}' unreachable while re-opening the change feed: {!r}",
                        self._name,
                        exc,
                    )
                    continue
            try:
                problem = await self._verify_delivery()
            except (StoreError, *_DRIVER_FAULTS) as exc:
                # The probe could not be sent: the pool does not reach the store yet. Keep the
                # listener and try again; no gap while the store is still away.
                problem = f"the probe could not be sent through the pool: {exc}"
            else:
                if problem is None:
                    return
                self._drop_listener()  # delivered nothing: LISTEN again on a fresh connection
            logger.bind(store=self._name, attempt=attempt).error(
                "store '{}' change feed re-opened but not verified: {}; retrying",
                self._name,
                problem,
            )

    def _next_probe_token(self) -> str:
        self._probe_seq += 1
        return f"{self._probe_instance}.{self._probe_seq}"

    async def _verify_delivery(self) -> str | None:
        """Send a probe NOTIFY through the POOL and wait for it on the listener, within
        ``heartbeat_timeout`` from sending to arrival. ``None`` when it arrived (the feed is
        verified: pool -> server -> listener), else why not (it was sent and did not arrive).

        Raises:
            StoreError: the probe could not be sent (mapped at the boundary), or did not leave
                within the time box; it proves nothing either way.
        """
        token = self._next_probe_token()
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._probe_waiters[token] = waiter
        self._feed.probes_sent += 1
        started = time.perf_counter()
        try:
            try:
                await self._send_probe(probe_payload(self._prefix, token))
            except (StoreError, *_DRIVER_FAULTS) as exc:
                self._feed.probe_failed(f"the probe could not be sent: {exc}", sent=False)
                if self._pool_down is None:
                    self._pool_down = (_now(), f"a probe could not be sent through it: {exc}")
                raise
            left = self._heartbeat_timeout - (time.perf_counter() - started)
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    arrived = await waiter
            except TimeoutError:
                problem = (
                    "a probe NOTIFY sent through the pool did not arrive on the listener "
                    f"({self._listen_name}) within {self._heartbeat_timeout:g}s"
                )
                self._feed.probe_failed(problem, sent=True)
                return problem
            self._feed.probe_verified(_now(), arrived - started)
            self._pool_answered()
            return None
        finally:
            self._probe_waiters.pop(token, None)

    async def _send_probe(self, payload: str) -> None:
        """``pg_notify`` the probe through the pool, bounded by ``heartbeat_timeout``.

        Not through :meth:`_run`: a probe that times out must not wait for a stalled connection
        to be reset on release, so its connection is terminated (the pool replaces it).
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError(f"PostgresStore '{self._name}' is not started (await start())")
        operation = "sending a change-feed probe"
        budget = self._heartbeat_timeout
        deadline = time.perf_counter() + budget
        try:
            conn = await pool.acquire(timeout=budget)
        except TimeoutError as exc:
            raise StoreError(
                f"store '{self._name}': no pool connection within {budget:g}s while {operation} "
                f"({self._in_use}/{self._max_size} in use)",
                sqlstate=None,
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation=operation, stage="acquire")
        self._in_use += 1
        try:
            left = max(deadline - time.perf_counter(), 0.001)
            await conn.execute("SELECT pg_notify($1, $2)", self._channel, payload, timeout=left)
        except TimeoutError as exc:
            conn.terminate()
            raise StoreError(
                f"store '{self._name}' did not answer within {budget:g}s while {operation}",
                sqlstate=None,
                store=self._name,
                transient=True,
                may_have_run=None,
            ) from exc
        except pgexc.ReadOnlySQLTransactionError as exc:  # NOTIFY on a standby
            standby = await self._in_recovery(conn)
            self._raise_at_boundary(
                exc, operation=operation, stage="query", connection=conn, in_recovery=standby
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation=operation, stage="query", connection=conn)
        except BaseException:
            conn.terminate()  # cancelled mid-call (close()): never hand it back half-done
            raise
        finally:
            self._in_use -= 1
            await self._release(pool, conn, operation)

    async def _heartbeat_until_lost(self) -> str:
        """Verify delivery every ``heartbeat_interval`` until the feed is lost; return why.

        Each beat sends a probe NOTIFY through the pool. Arrived: verified (time and round trip
        recorded). Sent but not arrived in time: LOST -- notifications stopped reaching the
        listener, whatever its socket says. Not sendable (the pool does not reach the store, or
        is exhausted): it proves nothing, so the listener's own connection is checked with
        ``SELECT 1``; if that fails too the feed is lost, else it is kept (shown unverified).
        """
        while True:
            try:
                async with asyncio.timeout(self._heartbeat_interval):
                    await self._lost.wait()
                return "the listener connection was closed (terminated, restarted or reset)"
            except TimeoutError:
                pass
            conn = self._listen_conn
            if conn is None or conn.is_closed():
                return "the listener connection was closed"
            try:
                problem = await self._verify_delivery()
            except (StoreError, *_DRIVER_FAULTS) as exc:
                unsent = f"the probe could not be sent through the pool ({exc})"
                problem = await self._listener_answers(conn, unsent)
                if problem is None and not self._feed.unverified_reported:
                    self._feed.unverified_reported = True
                    logger.bind(store=self._name).warning(
                        "store '{}' change feed not verified: {}; the listener itself answers, "
                        "so it is kept (health shows it unverified until a probe arrives)",
                        self._name,
                        unsent,
                    )
            if problem is not None:
                conn.terminate()  # a stall gives no other signal; close() would wait on it
                return problem

    async def _listener_answers(self, conn: _Connection, unsent: str) -> str | None:
        """``SELECT 1`` on the listener connection: ``None`` if it answers, else why not."""
        async with self._listen_lock:
            try:
                async with asyncio.timeout(self._heartbeat_timeout):
                    await conn.fetchval("SELECT 1")
            except TimeoutError:
                return (
                    f"{unsent}, and the heartbeat got no answer within {self._heartbeat_timeout:g}s"
                )
            except _DRIVER_FAULTS as exc:
                return f"{unsent}, and the heartbeat failed: {exc!r}"
        return None

    # -- the dispatcher

    async def _dispatch(self, *, restart_after: float | None = None) -> None:
        """Turn queued NOTIFYs into NodeChange and CommitAnnounced, batch by batch.

        It does not die of a batch: a payload that does not parse is counted, logged (WARNING,
        rate-limited) and skipped; any other failure of a batch is logged at ERROR and declared
        as a gap (its changes may not have been delivered), and the next batch goes on.
        ``restart_after``: this task replaces one that died; wait that long, then declare the
        gap of that loss.
        """
        if restart_after is not None:
            await asyncio.sleep(restart_after)
            self._resume_if_recovered()
        while True:
            payloads = await self._next_batch()
            try:
                await self._dispatch_batch(payloads)
            except Exception as exc:  # noqa: BLE001 - reported at ERROR and declared as a gap
                self._batch_failed(exc, len(payloads))
            else:
                self._feed.consecutive_restarts = 0
            self._feed.report_held()

    async def _next_batch(self) -> list[object]:
        payloads = [await self._notifications.get()]
        while not self._notifications.empty() and len(payloads) < BATCH_SIZE:
            payloads.append(self._notifications.get_nowait())
        return payloads

    async def _dispatch_batch(self, payloads: list[object]) -> None:
        batch: list[Entry] = []
        for payload in payloads:  # each on its own: one bad payload cannot spoil the batch
            try:
                batch.extend(parse_notification(payload, self._prefix))
            except MalformedNotificationError as bad:
                self._feed.malformed(payload, str(bad))
        deliver = self._changes.observed  # live queries subscribe to it too
        announce = self._answers.observed
        if not batch or not (deliver or announce):
            return
        rows = await self._fetch_changed(batch) if deliver else {}
        for schema, path, op, version in batch:
            if deliver:
                # parse_notification checked the path and the version; the node is a row.
                change = trusted(
                    NodeChange,
                    {
                        "source": self._name,
                        "op": "delete" if op == "delete" else "upsert",
                        "path": path,
                        "version": version,
                        "node": rows.get((schema, path)),
                    },
                    _CHANGE_FIELDS,
                )
                self._publish(self._changes, change, "changes")
            if announce:
                announced = trusted(
                    CommitAnnounced,
                    {"source": self._name, "path": path, "version": version},
                    _ANNOUNCED_FIELDS,
                )
                self._offer_evidence(announced)

    def _batch_failed(self, exc: Exception, size: int) -> None:
        self._feed.failed_batches += 1
        reason = (
            f"a batch of {size} notification(s) could not be delivered: {type(exc).__name__}: {exc}"
        )
        logger.bind(store=self._name, error_type=type(exc).__name__).opt(exception=exc).error(
            "store '{}' change feed: {}; declaring a gap so dependents re-read", self._name, reason
        )
        self._feed_lost(reason)
        self._resume_if_recovered()

    async def _fetch_changed(self, batch: list[Entry]) -> dict[tuple[str, str], MeshNode]:
        wanted: dict[str, list[str]] = {}
        for schema, path, op, _ in batch:
            if op != "delete":
                wanted.setdefault(schema, []).append(path)
        found: dict[tuple[str, str], MeshNode] = {}
        conn = self._listen_conn
        if not wanted or conn is None:
            return found
        async with self._listen_lock:
            try:
                for schema, paths in wanted.items():
                    try:
                        table = f"{quote_identifier(schema)}.nodes"
                        records = (
                            await conn.fetch(
                                f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", paths[0]
                            )
                            if len(paths) == 1
                            else await conn.fetch(
                                f"SELECT {_COLUMNS} FROM {table} WHERE path = ANY($1::text[])",
                                paths,
                            )
                        )
                    except _MISSING_SCHEMA:
                        continue
                    built = _stored_nodes_of(records, schema[len(self._prefix) :])
                    for node in built:
                        found[(schema, node.path)] = node
            except (TimeoutError, *_DRIVER_FAULTS) as exc:
                # The feed connection failed: treat it as a loss, so a gap is declared once it
                # is back and dependents re-read what these changes carried.
                logger.bind(store=self._name).error(
                    "store '{}' change feed could not fetch changed rows: {!r}", self._name, exc
                )
                conn.terminate()
        return found
