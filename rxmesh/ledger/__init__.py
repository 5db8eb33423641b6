"""Pending writes: writes the store could not be reached for, re-issued once when it answers.

Every verb's unreachable arm (create, the bulk create, update, delete, move) answers UNAVAILABLE
and records a :class:`PendingWrite` in the mesh's :class:`PendingWriteLedger` (durably, in a
private journal directory, when one is set:
``await ledger.record_durably(intent)`` group-commits on the journal's writer thread, the
synchronous ``ledger.record(intent)`` waits while that thread writes the intent's own file; both
wait at most ``durable_timeout`` seconds, and count only in the journal's own directory).
:class:`PendingWriteRecovery` re-issues every pending intent when the store shows it answers
again (a declared change-feed gap, an announced commit) — never on a timer — and each settles as
one :class:`~rxmesh.operations.Verdict`, published as a :class:`PendingWriteOutcome` on
``ledger.outcomes``. See docs/pending-writes.md.
"""

from __future__ import annotations

# The exceptions' home is rxmesh.exceptions; these imports keep ``from rxmesh.ledger import ...``
# working, outside __all__.
from rxmesh.exceptions import JournalError as JournalError
from rxmesh.exceptions import PendingWriteHeldError as PendingWriteHeldError
from rxmesh.ledger._bound import DEFAULT_DURABLE_TIMEOUT
from rxmesh.ledger._inspect import read_journal
from rxmesh.ledger._jetstream import JetStreamLedger
from rxmesh.ledger._ledger import JOURNAL_DIR_ENV, PendingWriteLedger, RecordResult
from rxmesh.ledger._models import LedgerStatistics, PendingWrite, PendingWriteOutcome
from rxmesh.ledger._recovery import (
    DEFAULT_MAX_CONCURRENT_REISSUES,
    EvidenceSource,
    PendingWriteRecovery,
    ReissuingMesh,
    outcome_of,
)
from rxmesh.ledger._verbs import Answer

__all__ = [
    "DEFAULT_DURABLE_TIMEOUT",
    "DEFAULT_MAX_CONCURRENT_REISSUES",
    "JOURNAL_DIR_ENV",
    "Answer",
    "EvidenceSource",
    "JetStreamLedger",
    "LedgerStatistics",
    "PendingWrite",
    "PendingWriteLedger",
    "PendingWriteOutcome",
    "PendingWriteRecovery",
    "RecordResult",
    "ReissuingMesh",
    "outcome_of",
    "read_journal",
]
