"""The records of the pending-write ledger: an intent, its settled outcome, the ledger's figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rxmesh.model import AccessContext, MeshNode, NodePath
from rxmesh.operations import RejectionReason, Verdict

__all__ = [
    "CREATE_ORIGINS",
    "VERB_FIELDS",
    "LedgerStatistics",
    "Numbering",
    "Origin",
    "PendingWrite",
    "PendingWriteOutcome",
    "encoded_without",
]

Origin = Literal["create", "create_nodes", "update", "delete", "move"]
"""The verb whose UNAVAILABLE answer recorded an intent (``create_nodes``: the bulk create)."""

CREATE_ORIGINS = frozenset({"create", "create_nodes"})
VERB_FIELDS = frozenset({"expected_version", "expected_request_id", "target"})
"""The fields only an update's, delete's or move's intent sets; a create's is encoded without."""


class Numbering:
    """A ledger's sequence: the number the next intent it records is given (monotonic; past the
    journal's highest once it is loaded). Used under the ledger's lock."""

    def __init__(self) -> None:
        self.last = 0

    def number(self, intent: PendingWrite) -> PendingWrite:
        """``intent`` with the next sequence: the order of re-issue of one path's intents."""
        self.last += 1
        return intent.model_copy(update={"sequence": self.last})


def encoded_without(intent: PendingWrite) -> set[str] | None:
    """The fields an intent's journal encoding leaves out: a create's verb fields, and a
    sequence of 0 (so an intent of an older journal is encoded byte for byte as it was)."""
    left = set(VERB_FIELDS) if intent.origin in CREATE_ORIGINS else set()
    if intent.sequence == 0:
        left.add("sequence")
    return left or None


def _now() -> datetime:
    return datetime.now(UTC)


class PendingWrite(BaseModel):
    """An intent: a write the store could not be reached for, to be re-issued once.

    Args:
        node: the node exactly as requested (same path, which is its id). For a delete and a
            move, only its path matters (the node to delete; a move's source).
        requester: the resolved user id the create was made for (named in logs, "the writer").
        access: the :class:`AccessContext` the request was delivered with; the re-issue carries it,
            so it is authorised exactly as the first attempt was.
        request_id: the request's id; the re-issue keeps it, so a create that did land is
            recognised as LANDED.
        recorded_at: when the intent was recorded (UTC).
        origin: which verb recorded it (``"create"``, ``"create_nodes"`` for the bulk arm,
            ``"update"``, ``"delete"``, ``"move"``).
        expected_version: an update's, delete's or move's basis: the version of the node (a
            move's source) the request was based on. Its re-issue is a compare-and-set on it.
        expected_request_id: with it, the request id of the write that produced that version.
        target: a move's target path.
        sequence: the order the ledger recorded it in (assigned by the ledger when it records
            it, kept in the journal, monotonic across restarts of the journal); intents of one
            path are re-issued in this order, never by ``recorded_at`` (a wall clock can step
            back). 0: an intent of a journal written before sequences (ordered by
            ``recorded_at``, before every sequenced one).

    An intent of format 1 or of an older log carries no verb fields: it is a create (the fields
    default to a create's). A create's intent is encoded without them, byte for byte as before.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: MeshNode
    requester: str = Field(min_length=1, max_length=256)
    access: AccessContext | None = None
    request_id: str = Field(min_length=1, max_length=128)
    recorded_at: datetime = Field(default_factory=_now)
    origin: Origin = "create"
    expected_version: int | None = Field(default=None, ge=1)
    expected_request_id: str | None = Field(default=None, min_length=1, max_length=128)
    target: NodePath | None = None
    sequence: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _verb_fields(self) -> PendingWrite:
        if (self.target is None) == (self.origin == "move"):
            raise ValueError("a move's intent names its target, and only a move's does")
        if self.origin in CREATE_ORIGINS and (
            self.expected_version is not None or self.expected_request_id is not None
        ):
            raise ValueError("a create's intent has no expected version")
        return self

    @property
    def order(self) -> tuple[int, datetime]:
        """The key intents are re-issued in: the ledger's sequence (``recorded_at`` orders only
        the unsequenced intents of an older journal, among themselves)."""
        return self.sequence, self.recorded_at

    def __eq__(self, other: object) -> bool:
        """The same intent, whatever sequence each copy was given (the ledger numbers the copy
        it records; the caller keeps the one it built)."""
        if self is other:
            return True
        if not isinstance(other, PendingWrite):
            return NotImplemented
        mine, theirs = dict(self.__dict__), dict(other.__dict__)
        del mine["sequence"], theirs["sequence"]
        return mine == theirs

    def __hash__(self) -> int:
        return hash((self.key, self.request_id))

    @property
    def path(self) -> str:
        """The node's path (a move's source)."""
        return self.node.path

    @property
    def verb(self) -> str:
        """``"create"`` (the single or bulk create), ``"update"``, ``"delete"`` or ``"move"``."""
        return "create" if self.origin in CREATE_ORIGINS else self.origin

    @property
    def key(self) -> str:
        """What the ledger holds one intent per: the path for a create, else ``"<path> <verb>"``
        (a space is never in a path, so the keys of two verbs of one path never collide)."""
        return self.path if self.origin in CREATE_ORIGINS else f"{self.path} {self.origin}"


class PendingWriteOutcome(BaseModel):
    """How one re-issued intent settled: exactly one :class:`Verdict`.

    Args:
        intent: the intent that was re-issued.
        verdict: LANDED, ALREADY_PRESENT, ALREADY_ABSENT, CONFLICT or DROPPED.
        reason: the rejection reason of the re-issue's answer (``None`` when it landed, and
            when the intent was superseded).
        detail: the answer's text, for logs and operators.
        superseded_by: the ``request_id`` of the later request of the same requester for the
            same path that replaced this intent before it was re-issued (the verdict is then
            DROPPED: that later request carries the write); ``None`` otherwise.
        settled_at: when the verdict was reached (UTC).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    intent: PendingWrite
    verdict: Verdict
    reason: RejectionReason | None = None
    detail: str = ""
    superseded_by: str | None = None
    settled_at: datetime = Field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class LedgerStatistics:
    """A snapshot of a :class:`~rxmesh.ledger.PendingWriteLedger`'s figures.

    Attributes:
        journal_dir: the journal directory, or ``None`` when intents live in memory only.
        pending: intents recorded and not yet taken for re-issue.
        in_flight: intents taken and not yet settled (their journal files still exist).
        loaded: intents loaded from the journal when the ledger started.
        recorded: intents recorded by this ledger (including replacements).
        replaced: records that replaced an earlier intent for the same path.
        superseded: intents settled DROPPED because a later request of the same requester for
            the same path replaced them (counted in ``dropped`` too).
        held: records refused because another requester's intent for the path was outstanding.
        taken: intents handed out by ``take_all``.
        landed: settled LANDED.
        already_present: settled ALREADY_PRESENT.
        dropped: settled DROPPED.
        already_absent: settled ALREADY_ABSENT (a delete that found the node gone).
        conflicts: settled CONFLICT (another write came first; nothing was overwritten).
        quarantined: journal files, log segments or log entries moved aside as ``*.corrupt``.
        group_commits: groups the journal's writer thread made durable (at most one log
            ``fdatasync`` each, however many records shared it).
        durable_timeouts: record calls answered not recorded because the durable step did not
            return within the ledger's ``durable_timeout``.
        journal_fault: why records are answered not recorded now (the journal's directory was
            deleted or moved away, or its durable step is stuck), else ``None``.
        journal_lost: whether that is because the directory was deleted or moved away (it does
            not come back by itself).
    """

    journal_dir: str | None
    pending: int
    in_flight: int
    loaded: int
    recorded: int
    replaced: int
    taken: int
    landed: int
    already_present: int
    dropped: int
    quarantined: int
    superseded: int = 0
    held: int = 0
    group_commits: int = 0
    already_absent: int = 0
    conflicts: int = 0
    durable_timeouts: int = 0
    journal_fault: str | None = None
    journal_lost: bool = False

    @property
    def settled(self) -> int:
        """Every verdict reached, whatever it was."""
        return (
            self.landed + self.already_present + self.dropped + self.already_absent + self.conflicts
        )


def statistics_from(
    counts: Mapping[str, int], *, journal_dir: str | None, pending: int, in_flight: int
) -> LedgerStatistics:
    """The figures every journal keeps alike, from its tallies (named events and one per
    :class:`Verdict`); a journal adds its own with :func:`dataclasses.replace`."""
    return LedgerStatistics(
        journal_dir=journal_dir,
        pending=pending,
        in_flight=in_flight,
        loaded=counts["loaded"],
        recorded=counts["recorded"],
        replaced=counts["replaced"],
        taken=counts["taken"],
        landed=counts[Verdict.LANDED],
        already_present=counts[Verdict.ALREADY_PRESENT],
        dropped=counts[Verdict.DROPPED],
        already_absent=counts[Verdict.ALREADY_ABSENT],
        conflicts=counts[Verdict.CONFLICT],
        quarantined=counts["quarantined"],
        superseded=counts["superseded"],
        held=counts["held"],
    )
