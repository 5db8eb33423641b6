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

The layout: ``_ledger`` the public ledger over ``_bound`` (the durable step's time bound) and
``_core`` (its state and bookkeeping); ``_writer`` the writer thread; ``_log`` and ``_journal``
the journal's two formats, ``_directory`` its directory's safety checks, ``_inspect`` reading it
unchanged; ``_models`` the records; ``_publish`` how an intent is logged and a verdict told;
``_order`` one path's intents one after another; ``_verbs`` what a re-issue is per verb;
``_recovery`` the re-issue on evidence. The shared journal: ``_jetstream`` the ledger on a NATS
JetStream bucket, over ``_jetstream_leases`` (owners and take-over), ``_jetstream_debts`` (the
verdicts a replaced intent is owed), ``_jetstream_view`` (what a replica sees of the bucket) and
``_jetstream_entries`` (an entry's encoding).
"""

from __future__ import annotations

# The exceptions' home is rxmesh.exceptions; these imports keep ``from rxmesh.ledger import ...``
# working, outside __all__.
from rxmesh.exceptions import JournalError as JournalError
from rxmesh.exceptions import PendingWriteHeldError as PendingWriteHeldError
from rxmesh.ledger._inspect import read_journal as read_journal
from rxmesh.ledger._jetstream import JetStreamLedger
from rxmesh.ledger._ledger import (
    JOURNAL_DIR_ENV as JOURNAL_DIR_ENV,
)
from rxmesh.ledger._ledger import (
    PendingWriteLedger,
)
from rxmesh.ledger._ledger import (
    RecordResult as RecordResult,
)
from rxmesh.ledger._models import LedgerStatistics as LedgerStatistics
from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome
from rxmesh.ledger._recovery import (
    DEFAULT_MAX_CONCURRENT_REISSUES as DEFAULT_MAX_CONCURRENT_REISSUES,
)
from rxmesh.ledger._recovery import (
    PendingWriteRecovery,
)
from rxmesh.ledger._recovery import (
    outcome_of as outcome_of,
)
from rxmesh.ledger._verbs import Answer as Answer

__all__ = [
    "JetStreamLedger",
    "PendingWrite",
    "PendingWriteLedger",
    "PendingWriteOutcome",
    "PendingWriteRecovery",
]
