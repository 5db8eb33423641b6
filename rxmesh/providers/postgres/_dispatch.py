"""The change feed's dispatcher: queued NOTIFY payloads become :class:`NodeChange` (the changed
rows fetched on the listener's connection) and :class:`CommitAnnounced`, batch by batch, and
the positions (snapshots) every change a live query has been given reaches.

A snapshot ``S`` is reached once the listener has delivered a notification of a transaction
whose id is at least ``S``'s ``xmax``: that transaction began writing after ``S`` was taken, so
it committed after every transaction ``S`` sees, and PostgreSQL delivers a channel's
notifications in commit order, so every one of theirs came before it. The dispatcher takes a
snapshot on the listener's connection after a fetch, keeps it until a later batch reaches it,
then publishes it after that batch's changes; a listener lost meanwhile forgets it (what it
missed is no longer behind the notification that would confirm it).
"""

from __future__ import annotations

from loguru import logger

from rxmesh._util.trusted import fields_of, trusted
from rxmesh.model import CommitAnnounced, MeshNode, NodeChange
from rxmesh.providers.postgres._book import FeedBook
from rxmesh.providers.postgres._errors import DRIVER_FAULTS, MISSING_SCHEMA
from rxmesh.providers.postgres._evidence import Evidence
from rxmesh.providers.postgres._listener import Listener
from rxmesh.providers.postgres._notifications import (
    BATCH_SIZE,
    Entry,
    MalformedNotificationError,
    parse_payload,
)
from rxmesh.providers.postgres._rows import _stored_nodes_of
from rxmesh.providers.postgres._schema import _COLUMNS, quote_identifier
from rxmesh.providers.postgres._streams import Hot

__all__ = ["Dispatcher"]

_CHANGE_FIELDS = fields_of(NodeChange)
_ANNOUNCED_FIELDS = fields_of(CommitAnnounced)


class Dispatcher:
    """Turns what the listener heard into the store's ``changes`` and evidence."""

    def __init__(
        self,
        name: str,
        prefix: str,
        book: FeedBook,
        listener: Listener,
        changes: Hot,
        evidence: Evidence,
        positions: Hot,
    ) -> None:
        self._positions = positions
        self._checkpoint: tuple[object, str, int] | None = None
        """A snapshot not reached yet: the listener connection it was taken on, its text and
        its ``xmax``."""
        self._name = name
        self._prefix = prefix
        self._book = book
        self._listener = listener
        self._changes = changes
        self._evidence = evidence

    async def next_batch(self) -> list[object]:
        """The next payloads: at least one (waited for), at most :data:`BATCH_SIZE`."""
        queue = self._listener.notifications
        payloads = [await queue.get()]
        while not queue.empty() and len(payloads) < BATCH_SIZE:
            payloads.append(queue.get_nowait())
        return payloads

    async def deliver(self, payloads: list[object]) -> None:
        """Parse ``payloads`` (each on its own: one bad payload cannot spoil the batch), fetch
        the changed rows if anyone follows the changes, and publish."""
        batch: list[Entry] = []
        highest = -1
        for payload in payloads:
            try:
                entries, xid = parse_payload(payload, self._prefix)
            except MalformedNotificationError as bad:
                self._book.malformed(payload, str(bad))
                continue
            batch.extend(entries)
            if xid is not None and xid > highest:
                highest = xid
        deliver = self._changes.observed  # live queries subscribe to it too
        announce = self._evidence.stream.observed
        if not batch or not (deliver or announce):
            return
        conn = self._listener.conn
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
                self._changes.publish(change)
            if announce:
                announced = trusted(
                    CommitAnnounced,
                    {"source": self._name, "path": path, "version": version},
                    _ANNOUNCED_FIELDS,
                )
                self._evidence.offer(announced)
        if deliver and self._positions.observed:
            await self._advance(conn, highest)

    @property
    def checkpoint(self) -> str | None:
        """The snapshot waiting to be reached (its text), if any."""
        return None if self._checkpoint is None else self._checkpoint[1]

    def forget(self) -> None:
        """The listener was lost: the snapshot waiting to be reached can no longer be."""
        self._checkpoint = None

    async def _advance(self, conn: object, highest: int) -> None:
        """Publish the waiting snapshot if this batch (delivered on ``conn``, its highest
        transaction id ``highest``) reached it; then take the next one to wait for."""
        checkpoint = self._checkpoint
        if checkpoint is not None:
            taken_on, snapshot, xmax = checkpoint
            if taken_on is not conn or conn is not self._listener.conn:
                self._checkpoint = checkpoint = None
            elif highest >= xmax:
                self._checkpoint = checkpoint = None
                self._positions.publish(snapshot)
        if checkpoint is None and conn is not None and conn is self._listener.conn:
            self._checkpoint = await self._snapshot(conn)

    async def _snapshot(self, conn: object) -> tuple[object, str, int] | None:
        listener = self._listener.conn
        if listener is None or listener is not conn:
            return None
        async with self._listener.lock:
            try:
                snapshot = await listener.fetchval("SELECT pg_current_snapshot()::text")
            except (TimeoutError, *DRIVER_FAULTS) as exc:
                logger.bind(store=self._name).error(
                    "store '{}' change feed could not take a snapshot: {!r}", self._name, exc
                )
                listener.terminate()
                return None
        return (conn, snapshot, int(snapshot.split(":", 2)[1]))

    async def _fetch_changed(self, batch: list[Entry]) -> dict[tuple[str, str], MeshNode]:
        wanted: dict[str, list[str]] = {}
        for schema, path, op, _ in batch:
            if op != "delete":
                wanted.setdefault(schema, []).append(path)
        found: dict[tuple[str, str], MeshNode] = {}
        conn = self._listener.conn
        if not wanted or conn is None:
            return found
        async with self._listener.lock:
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
                    except MISSING_SCHEMA:
                        continue
                    built = _stored_nodes_of(records, schema[len(self._prefix) :])
                    for node in built:
                        found[(schema, node.path)] = node
            except (TimeoutError, *DRIVER_FAULTS) as exc:
                # The feed connection failed: treat it as a loss, so a gap is declared once it
                # is back and dependents re-read what these changes carried.
                logger.bind(store=self._name).error(
                    "store '{}' change feed could not fetch changed rows: {!r}", self._name, exc
                )
                conn.terminate()
        return found
