"""Positions in the store's change order, and the resume tokens that carry them.

A position is a PostgreSQL snapshot (``pg_current_snapshot()``: ``xmin:xmax:xip,...``), not a
sequence number: a sequence is handed out when a transaction writes, not when it commits, so a
reader that has seen number 7 committed can still meet 6 committing later. A snapshot says
exactly which transactions' work it sees, concurrent ones included, and every row remembers the
transaction that last wrote it (``changed_xid``; a deletion leaves a tombstone with its own), so
"what changed since" is every row and tombstone whose transaction the snapshot did not see.

Nothing here touches a connection; the token is text a client keeps and sends back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TOKEN_VERSION", "Position", "parse_token"]

TOKEN_VERSION = "pg1"
"""The first field of every token of this store; another is not one of ours."""
_SNAPSHOT = re.compile(r"(\d{1,20}):(\d{1,20}):((?:\d{1,20}(?:,\d{1,20})*)?)")
_IDENTITY = re.compile(r"[0-9a-z_]{1,80}")
_MAX_IN_PROGRESS = 10_000
"""In-progress transactions a token may list (a server's are bounded by its connections)."""


@dataclass(frozen=True, slots=True)
class Position:
    """A snapshot of the database a store's tables live in, with that database's identity."""

    identity: str
    """Which database (system identifier, database and schema prefix): a token from another
    store cannot be compared with this one's rows."""
    xmin: int
    """Every transaction below it is finished, and seen if it committed."""
    xmax: int
    """No transaction from it on is seen."""
    in_progress: frozenset[int]
    """Transactions between ``xmin`` and ``xmax`` running when the snapshot was taken: unseen."""

    @classmethod
    def of(cls, identity: str, snapshot: str) -> Position:
        """The position of ``snapshot`` (the text of a ``pg_snapshot``) in ``identity``."""
        found = _SNAPSHOT.fullmatch(snapshot)
        if found is None:
            raise ValueError(f"not a pg_snapshot: {snapshot[:80]!r}")
        listed = found.group(3)
        in_progress = frozenset(int(x) for x in listed.split(",")) if listed else frozenset()
        xmin, xmax = int(found.group(1)), int(found.group(2))
        if not xmin <= xmax or any(not xmin <= x < xmax for x in in_progress):
            raise ValueError(f"not a consistent pg_snapshot: {snapshot[:80]!r}")
        return cls(identity, xmin, xmax, in_progress)

    @property
    def snapshot(self) -> str:
        """The ``pg_snapshot`` text (what the resume read compares rows with)."""
        listed = ",".join(str(x) for x in sorted(self.in_progress))
        return f"{self.xmin}:{self.xmax}:{listed}"

    @property
    def token(self) -> str:
        """The resume token: ``pg1/<identity>/<snapshot>``."""
        return f"{TOKEN_VERSION}/{self.identity}/{self.snapshot}"

    def sees(self, xid: int) -> bool:
        """Whether the work of committed transaction ``xid`` is visible at this position."""
        return xid < self.xmin or (xid < self.xmax and xid not in self.in_progress)

    def not_before(self, other: Position) -> bool:
        """Whether this snapshot was taken no earlier than ``other`` (both bounds at least as
        high). Any position a view has reached is a valid token for it; a view moves its token
        only forward, so a resume never asks for more than it must."""
        return self.xmin >= other.xmin and self.xmax >= other.xmax


def parse_token(token: object, identity: str) -> Position | None:
    """The position a token names, if it is one of this database's; ``None`` for anything else
    (another store's token, a malformed or hostile one): the caller answers with a reset, never
    an error, since a client holding an old or foreign token did nothing wrong."""
    if not isinstance(token, str) or len(token) > 200_000:
        return None
    parts = token.split("/")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION or parts[1] != identity:
        return None
    if not _IDENTITY.fullmatch(parts[1]):
        return None
    try:
        position = Position.of(identity, parts[2])
    except ValueError:
        return None
    if len(position.in_progress) > _MAX_IN_PROGRESS:
        return None
    return position
