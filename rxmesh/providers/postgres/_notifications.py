"""The change feed's NOTIFY payloads: the parser of what the triggers send (anyone who may
connect can NOTIFY on the channel, so nothing is assumed) and the delivery probe's payload.

Nothing here imports asyncpg or touches a connection.
"""

from __future__ import annotations

import json
import re

from rxmesh.model import MAX_PATH_LENGTH, partition_of, validate_path
from rxmesh.model._rules import PLAIN_PATH

__all__ = [
    "BATCH_SIZE",
    "PROBE_OP",
    "Entry",
    "MalformedNotificationError",
    "parse_notification",
    "parse_payload",
    "parse_probe",
    "probe_marker",
    "probe_payload",
]

Entry = tuple[str, str, str, int]
"""One changed row a NOTIFY announced: ``(schema, path, op, version)``."""

BATCH_SIZE = 100
"""Payloads taken from the queue per batch (one row fetch per schema per batch)."""
_NOTIFY_MAX_BYTES = 8000
"""PostgreSQL's limit on a NOTIFY payload; a longer one cannot be ours."""
_MAX_VERSION = 2**63 - 1
_OPS = frozenset({"upsert", "delete"})

PROBE_OP = "probe"
"""The op of a delivery probe's payload, ``[<schema_prefix>, "probe", <token>]``: the prefix
alone is never a schema of the store (a partition name is never empty), and "probe" is never an
op of a row change, so a probe cannot be mistaken for one."""
_PROBE_TOKEN = re.compile(r"[0-9a-f]{1,32}(\.[0-9]{1,20})?")


class MalformedNotificationError(ValueError):
    """A change-feed payload that does not parse; the message says why."""


def _shown(value: object, limit: int = 100) -> str:
    """``value`` for a log line: ASCII only (any sink can write it), at most ``limit`` chars."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_notification(payload: object, prefix: str) -> list[Entry]:
    """The rows one payload announces (see :func:`parse_payload`)."""
    return parse_payload(payload, prefix)[0]


def parse_payload(payload: object, prefix: str) -> tuple[list[Entry], int | None]:
    """The rows one payload announces, ``[schema, op, [[path, version], ...], xid]``, all
    checked, and the writing transaction's id (``None`` from a trigger that does not send it).

    Anyone who may connect can NOTIFY on the channel, so nothing is assumed: the schema must be
    one of this store's (``prefix`` + a valid partition), ``op`` ``"upsert"`` or ``"delete"``,
    every path valid and in that partition, every version and the xid a non-negative bigint
    (not a bool).

    Raises:
        MalformedNotificationError: it does not parse; the message says why.
    """
    if not isinstance(payload, str):
        raise MalformedNotificationError(f"the payload is {type(payload).__name__}, not text")
    if len(payload) > _NOTIFY_MAX_BYTES:
        raise MalformedNotificationError(
            f"the payload is {len(payload)} characters long; ours are under {_NOTIFY_MAX_BYTES}"
        )
    try:
        decoded = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise MalformedNotificationError(
            f"not JSON ({type(exc).__name__}: {_shown(str(exc), 80)})"
        ) from None
    if not isinstance(decoded, list) or len(decoded) not in (3, 4):
        raise MalformedNotificationError(
            f"not a [schema, op, rows, xid] array: {_shown(decoded)}"
        )
    schema, op, rows = decoded[:3]
    xid = decoded[3] if len(decoded) == 4 else None
    if len(decoded) == 4 and not (type(xid) is int and 0 <= xid <= _MAX_VERSION):
        raise MalformedNotificationError(f"xid {_shown(xid)} is not a transaction id")
    if not isinstance(schema, str) or not schema.startswith(prefix):
        raise MalformedNotificationError(
            f"schema {_shown(schema)} is not one of this store's (prefix {prefix!r})"
        )
    partition = schema[len(prefix) :]
    try:
        validate_path(partition, allow_reserved=False)
    except ValueError:
        raise MalformedNotificationError(
            f"schema {_shown(schema)} does not name a valid partition"
        ) from None
    if "/" in partition:
        raise MalformedNotificationError(f"schema {_shown(schema)} does not name a partition")
    if not isinstance(op, str) or op not in _OPS:
        raise MalformedNotificationError(f"op {_shown(op)} is neither 'upsert' nor 'delete'")
    if not isinstance(rows, list) or not rows:
        raise MalformedNotificationError(f"rows {_shown(rows)} is not a non-empty array")
    entries: list[Entry] = []
    under = partition + "/"
    for row in rows:
        if type(row) is list and len(row) == 2:  # a row as the trigger writes it: one test
            path, version = row
            if (
                type(path) is str
                and path.startswith(under)
                and len(path) <= MAX_PATH_LENGTH
                and PLAIN_PATH.fullmatch(path) is not None
                and type(version) is int
                and 0 <= version <= _MAX_VERSION
            ):
                entries.append((schema, path, op, version))
                continue
        entries.append(_checked_row(row, schema, partition, op))
    return entries, xid


def _checked_row(row: object, schema: str, partition: str, op: str) -> Entry:
    """A row of :func:`parse_notification` judged by the rules one by one (the first broken
    one named): what a row that is not plainly one of ours takes (a system record's path)."""
    if not isinstance(row, list) or len(row) != 2:
        raise MalformedNotificationError(f"row {_shown(row)} is not a [path, version] pair")
    path, version = row
    try:
        validate_path(path)
    except ValueError:
        raise MalformedNotificationError(f"path {_shown(path)} is not a valid path") from None
    if partition_of(path) != partition:
        raise MalformedNotificationError(
            f"path {_shown(path)} is not in partition {partition!r} of its schema"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise MalformedNotificationError(f"version {_shown(version)} is not an integer")
    if not 0 <= version <= _MAX_VERSION:
        raise MalformedNotificationError(f"version {version} is out of range")
    return (schema, path, op, version)


def probe_marker(prefix: str) -> str:
    """How every probe payload of ``prefix`` begins (a cheap test before any JSON is decoded)."""
    return json.dumps([prefix, PROBE_OP])[:-1] + ", "


def probe_payload(prefix: str, token: str) -> str:
    """The payload of a delivery probe: ``[<prefix>, "probe", <token>]``."""
    return json.dumps([prefix, PROBE_OP, token])


def parse_probe(payload: str, prefix: str) -> str:
    """The token of a probe payload of ``prefix`` (see :func:`probe_payload`).

    Raises:
        MalformedNotificationError: it looks like a probe but is not one (it is then counted as
            malformed, like any payload that does not parse).
    """
    try:
        decoded = json.loads(payload) if len(payload) <= 200 else None
    except ValueError:
        decoded = None
    if (
        not isinstance(decoded, list)
        or len(decoded) != 3
        or decoded[:2] != [prefix, PROBE_OP]
        or not isinstance(decoded[2], str)
        or not _PROBE_TOKEN.fullmatch(decoded[2])
    ):
        raise MalformedNotificationError(f"not a probe of this store's channel: {_shown(payload)}")
    return decoded[2]
