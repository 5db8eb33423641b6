"""The change feed's dispatcher: queued NOTIFY payloads become :class:`NodeChange` (the changed
rows fetched on the listener's connection) and :class:`CommitAnnounced`, batch by batch.
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
    parse_notification,
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
    ) -> None:
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
        for payload in payloads:
            try:
                batch.extend(parse_notification(payload, self._prefix))
            except MalformedNotificationError as bad:
                self._book.malformed(payload, str(bad))
        deliver = self._changes.observed  # live queries subscribe to it too
        announce = self._evidence.stream.observed
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
                self._changes.publish(change)
            if announce:
                announced = trusted(
                    CommitAnnounced,
                    {"source": self._name, "path": path, "version": version},
                    _ANNOUNCED_FIELDS,
                )
                self._evidence.offer(announced)

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
