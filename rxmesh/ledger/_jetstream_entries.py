"""An entry of the shared JetStream journal: what it holds, and its bytes.

An intent entry is ``{"v":1,"owner":...,"intent":...}``, with ``"owed":[...]`` after the intent
when it carries debts: the intents it replaced whose verdict is not published yet, each with
the replica that owned it then (``"intent":null`` once its own intent is settled and only debts
are left). The form written is read straight from its bytes; any other JSON form of a valid
entry is read too.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from rxmesh.exceptions import JournalError
from rxmesh.ledger._models import PendingWrite

__all__ = [
    "OWNER_PATTERN",
    "Debts",
    "Entry",
    "Owed",
    "decode",
    "default_owner",
    "encode",
    "key_token",
    "lost_the_race",
    "untoken",
]

OWNER_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FORMAT = 1
# The head of an entry as _value writes it: its intent is validated straight from the bytes.
_HEAD = re.compile(rb'\{"v":1,"owner":"([A-Za-z0-9_-]{1,64})","intent":')


def key_token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8", "surrogatepass")).decode().rstrip("=")


def untoken(token: str) -> str:
    padded = token + "=" * (-len(token) % 4)
    return base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")


def lost_the_race(exc: BaseException) -> bool:
    """Whether a compare-and-set write was refused because the entry moved on since the
    revision it named. nats-py says so with ``KeyWrongLastSequenceError`` from ``create`` and
    ``update``, but ``delete(last=...)`` lets JetStream's own API error (10071) through."""
    from nats.js.errors import APIError, KeyWrongLastSequenceError

    if isinstance(exc, KeyWrongLastSequenceError):
        return True
    return isinstance(exc, APIError) and exc.err_code in (10071, 10164)


def default_owner() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:32] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(slots=True, frozen=True)
class Owed:
    """A verdict an entry owes: ``intent`` was replaced, by request ``by``, while ``owner``
    owned it. It is published by whoever removes it from the entry by compare-and-set."""

    owner: str
    intent: PendingWrite
    by: str


class Entry:
    """An intent's entry as last seen: the intent, its owner, the revision, what it owes.

    Another replica's intent is kept as the JSON it was validated from: one object where the
    model is many, and every replica holds every intent, each walked by every full pass of
    the cyclic collector. It is decoded again when it is needed (a claim, an answer settling
    it); this replica's own intents, the ones it re-issues, stay decoded.
    """

    __slots__ = ("_held", "owed", "owner", "request_id", "requester", "revision")

    def __init__(
        self, intent: PendingWrite, owner: str, revision: int, owed: tuple[Owed, ...] = ()
    ) -> None:
        self._held: PendingWrite | bytes = intent
        self.owner = owner
        self.revision = revision
        self.owed = owed
        self.request_id = intent.request_id
        self.requester = intent.requester

    @property
    def intent(self) -> PendingWrite:
        held = self._held
        return held if isinstance(held, PendingWrite) else PendingWrite.model_validate_json(held)

    @property
    def held(self) -> PendingWrite | bytes:
        """The intent, or the JSON it was validated from."""
        return self._held

    def compact(self, raw: bytes) -> None:
        """Keep the intent as ``raw``, the JSON it was just validated from."""
        self._held = raw

    def keep(self) -> None:
        """Keep the intent decoded (this replica re-issues it)."""
        if not isinstance(self._held, PendingWrite):
            self._held = PendingWrite.model_validate_json(self._held)

    def moved(self, revision: int, owed: tuple[Owed, ...], owner: str | None = None) -> Entry:
        """The same intent at ``revision``, owing ``owed`` (owned by ``owner`` if given)."""
        moved = Entry.__new__(Entry)
        moved._held = self._held
        moved.owner = self.owner if owner is None else owner
        moved.revision = revision
        moved.owed = owed
        moved.request_id = self.request_id
        moved.requester = self.requester
        return moved


@dataclass(slots=True)
class Debts:
    """An entry whose intent was settled while it still owed verdicts: only those remain."""

    owed: tuple[Owed, ...]
    revision: int


def _owed_from(item: Any) -> Owed:
    # ValueError throughout: the caller quarantines an entry on any ValueError.
    if not isinstance(item, dict):
        raise ValueError("a debt that is not an object")  # noqa: TRY004
    owner, by = item.get("owner"), item.get("by")
    if not isinstance(owner, str) or not OWNER_PATTERN.fullmatch(owner):
        raise ValueError("a debt with no valid owner")
    if not isinstance(by, str):
        raise ValueError("a debt that names no request")  # noqa: TRY004
    return Owed(owner, PendingWrite.model_validate(item.get("intent")), by)


def decode(value: bytes | None, path: str, revision: int, reader: str) -> Entry | Debts:
    """The entry of key ``path`` at ``revision`` from its bytes, as replica ``reader`` keeps it.

    Raises:
        ValueError: it cannot be decoded, or what it holds does not belong under ``path``.
    """
    head = _HEAD.match(value or b"")
    if value is not None and head is not None and value.endswith(b"}"):
        try:
            written = PendingWrite.model_validate_json(value[head.end() : -1])
        except ValueError:
            pass  # not as _value writes it after all: read as any document
        else:
            if written.key != path:
                raise ValueError(f"its intent is for {written.key!r}, not {path!r}")
            decoded = Entry(written, head[1].decode(), revision)
            if decoded.owner != reader:
                decoded.compact(value[head.end() : -1])
            return decoded
    try:
        document = json.loads(value or b"")
        if not isinstance(document, dict) or document.get("v") != _FORMAT:
            raise ValueError("not a format-1 entry")
        owner = document.get("owner")
        if not isinstance(owner, str) or not OWNER_PATTERN.fullmatch(owner):
            raise ValueError("no valid owner")
        raw = document.get("intent")
        intent = None if raw is None else PendingWrite.model_validate(raw)
        debts = document.get("owed", [])
        if not isinstance(debts, list):
            raise ValueError("its debts are not a list")  # noqa: TRY004
        owed = tuple(_owed_from(item) for item in debts)
    except ValueError as exc:  # json and pydantic errors are ValueErrors
        raise ValueError(f"undecodable entry: {exc}") from exc
    for held in (intent, *(debt.intent for debt in owed)):
        if held is not None and held.key != path:
            raise ValueError(f"its intent is for {held.key!r}, not {path!r}")
    if intent is not None:
        return Entry(intent, owner, revision, owed)
    if not owed:
        raise ValueError("undecodable entry: neither an intent nor a debt")
    return Debts(owed, revision)


def encode(
    intent: PendingWrite | bytes | None, owner: str, owed: tuple[Owed, ...], bucket: str
) -> bytes:
    """An entry's bytes: ``intent`` (or its JSON; ``None``: only debts are left), its owner and
    its debts.

    Raises:
        JournalError: an intent cannot be encoded (named after ``bucket``).
    """
    # An owner is [A-Za-z0-9_-]: it needs no escaping.
    head = b'{"v":%d,"owner":"%s","intent":' % (_FORMAT, owner.encode())
    if intent is None:
        body = b"null"
    else:
        body = intent if isinstance(intent, bytes) else _json(intent, bucket)
    if not owed:
        return head + body + b"}"
    debts = b",".join(
        b'{"owner":"%s","by":%s,"intent":%s}'
        % (debt.owner.encode(), json.dumps(debt.by).encode(), _json(debt.intent, bucket))
        for debt in owed
    )
    return head + body + b',"owed":[' + debts + b"]}"


def _json(intent: PendingWrite, bucket: str) -> bytes:
    try:
        return intent.model_dump_json().encode()
    except ValueError:
        pass  # a lone surrogate: UTF-8 cannot carry it, JSON's \u escape can
    try:
        document = intent.model_dump(mode="json", exclude_defaults=False)
        return json.dumps(document, separators=(",", ":")).encode()
    except ValueError as exc:
        raise JournalError(
            f"could not encode the pending write for {intent.key!r} for the journal: {exc}",
            path=bucket,
        ) from exc
