"""Rows as nodes, and nodes as rows: the decoding of what a read returns (validated for point
reads, trusted and built in bulk for the live reads), the creation times of a live read's text
columns, and the JSON text a write sends.

A row this process cannot read as a node (another writer's, or damaged) is that row's defect,
reported once, never the death of the read that met it.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from itertools import repeat
from typing import Any, NoReturn

import asyncpg
from loguru import logger

from rxmesh._util.collector import collector_paused
from rxmesh._util.trusted import (
    fields_of,
    set_dict,
    set_extra,
    set_fields_set,
    set_private,
    trusted,
)
from rxmesh.model import MeshNode

__all__: list[str] = []

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
    """The rows' contents, decoded by one ``json.loads`` of the whole chunk; a content this
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
    asyncpg's binary decoding makes of them: aware, in UTC (``None`` stays ``None``), for a
    fraction of the cost of asyncpg's binary decoding."""
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
_STORED_FIELDS_SET = fields_of(MeshNode)
"""The fields set of every node built by :func:`_stored_nodes_of`: one set for all of them (a
frozen model never changes it, and pydantic copies it before a ``model_copy`` updates it), so a
50k-row read makes 50k fewer objects for the garbage collector to walk."""
_BUILD_CHUNK = 1000
"""Rows built (or compared) per step of a large read; the loop gets a turn between two steps, so
a 50k-row Initial or gap re-select never holds it for long."""


def _stored_nodes_of(
    rows: Sequence[asyncpg.Record], partition: str, *, stamps_as_text: bool = False
) -> list[MeshNode]:
    """Rows of this store's own table of ``partition`` (``_COLUMNS`` order), built without
    pydantic validation.

    Every row of those tables was validated at the write boundary (a :class:`MeshNode` is
    validated when it is made, and the store writes nothing else), so the live-query reads (the
    Initial, the gap re-select, the change feed's row fetch) trust them: a fraction of a
    validated build's cost, the contents decoded by one ``json.loads`` of the whole chunk. What
    is kept is the check a foreign or corrupt row fails cheaply: the path must lie in the
    table's partition and the version must be >= 0; a chunk with a row failing it is built row
    by row, that row by :func:`_node_from_row` (full validation, which raises on a corrupt row).
    Point reads (``read``/``read_many``, which feed existence checks and grants) always
    validate. ``stamps_as_text``: the rows hold ``created_at`` as text (:data:`_LIVE_COLUMNS`).
    """
    with collector_paused():  # nothing built here can be garbage yet (rxmesh._util.collector)
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
        # rxmesh._util.trusted.trusted, one attribute at a time for the whole chunk: each setter
        # applied by C-level ``map``, not by a Python-level call per row and attribute.
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


def _bulk_json_encoder() -> Callable[[object], str]:
    """``json.dumps`` for a bulk window's contents, cheaper: one C encoder made once
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
