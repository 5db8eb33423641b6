"""The rxmesh exception tree.

Every exception rxmesh raises on purpose derives from :class:`RxMeshError`. Errors are named by
cause: closed by us (:class:`MeshDisposedError`) versus broken by the world
(:class:`StoreUnavailableError`, :class:`StoreError`). Builtin co-bases are added where a user would
naturally catch them (``except ValueError`` catches every validation refusal, ``except
PermissionError`` catches a missing grant)::

    RxMeshError (Exception)
    ├── StoreError                        a store's boundary error; has ``sqlstate``
    │   ├── StorePoolExhaustedError       this process's pool had no free connection (back-pressure)
    │   ├── StoreConflictError            a row is already at that path (sqlstate 23505; a verdict)
    │   ├── StoreVersionConflictError     compare-and-set refused: the row is not at the expected
    │   │                                 version (another write came first; a verdict)
    │   └── ChangeFeedUnverifiedError     start() refused: probes sent through the pool never
    │                                     reached the LISTEN connection (a pooler? listen_dsn=)
    ├── QueryProviderStalledError         the fan-in's Initial gate fired (not a TimeoutError)
    ├── DeliveryFailure                   a NACK that crossed a messaging boundary (``error_type``)
    ├── BuildCoordinationUnreachableError the build-claim handshake got no answer (or NO_RESPONDERS)
    ├── MalformedWitnessRecordError       a witness record says nothing readable (also a ValueError)
    ├── JournalError                      the pending-write journal cannot be used or written
    ├── PendingWriteHeldError             another requester's intent for that path is outstanding
    ├── MeshDisposedError                 the mesh was disposed by its owner
    ├── SlowConsumerError                 an ``async for`` fell max_pending items behind its stream
    ├── DrillSetupError                   ``rxmesh drill`` could not begin (its store did not start)
    └── NodeOperationError                UNKNOWN; base of the verbs' errors
        ├── StoreUnavailableError         UNAVAILABLE: not evaluated, nothing written
        ├── NodeExistsError               NODE_ALREADY_EXISTS
        ├── NodeVersionConflictError      VERSION_CONFLICT: another write came first
        ├── NodeAccessDeniedError         FORBIDDEN              (also a PermissionError)
        └── NodeValidationError           VALIDATION_FAILED      (also a ValueError)
            ├── InvalidPathError          INVALID_PATH
            └── InvalidNodeTypeError      INVALID_NODE_TYPE

The classification of these (which ones mean "the store could not be reached") is not made here:
it lives in :mod:`rxmesh.faults`, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

__all__ = [
    "BuildCoordinationUnreachableError",
    "ChangeFeedUnverifiedError",
    "DeliveryFailure",
    "InvalidNodeTypeError",
    "InvalidPathError",
    "JournalError",
    "MeshDisposedError",
    "NodeAccessDeniedError",
    "NodeExistsError",
    "NodeOperationError",
    "NodeValidationError",
    "NodeVersionConflictError",
    "PendingWriteHeldError",
    "QueryProviderStalledError",
    "RxMeshError",
    "SlowConsumerError",
    "StoreConflictError",
    "StoreError",
    "StoreUnavailableError",
    "StoreVersionConflictError",
]


class RxMeshError(Exception):
    """Base of every exception rxmesh raises on purpose."""


class StoreError(RxMeshError):
    """An error a store provider raises at its boundary.

    It is a *DB frame* for :func:`rxmesh.faults.is_transient_connect_fault`: it carries a
    ``sqlstate`` (``None`` where the driver knew none). Providers always ``raise StoreError(...)
    from exc`` so the network cause stays inside the chain.

    Args:
        message: what happened, naming the store.
        sqlstate: the SQLSTATE the condition maps to (``"08001"`` failed connect, ``"08006"`` lost
            connection, ...), or ``None``.
        store: a printable name of the store (``"postgres@127.0.0.1:5432"``).
        transient: the driver's own judgement that this was an infrastructure blip.
        may_have_run: for a lost connection, whether the statement may have been executed.
    """

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        store: str | None = None,
        transient: bool = False,
        may_have_run: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.store = store
        self.transient = transient
        self.may_have_run = may_have_run


class StorePoolExhaustedError(StoreError):
    """This process's connection pool had no free connection in time (back-pressure).

    The store was not reached; the text names this process's pool, not the database.
    """


class ChangeFeedUnverifiedError(StoreError):
    """A store's ``start()`` refused: a probe NOTIFY sent through its pool never reached its LISTEN
    connection, so its change feed would be silently dead (live queries would never see another
    process's commits; pending writes would never get their evidence).

    The usual cause is a transaction-pooling proxy (PgBouncer, RDS Proxy, Supavisor) in front of
    the DSN: it hands the LISTEN session's server connection to other clients. Pass
    ``listen_dsn=`` a direct connection to the primary. It is a configuration error, not an
    outage: :func:`rxmesh.faults.is_store_unreachable` refuses it (retrying changes nothing).

    Args:
        message: what is wrong and how to fix it, naming the store.
        store: a printable name of the store.
        pooled: whether a pooler was detected on the pool's DSN (``None``: not asked).
        listen_target: the printable name of the listener's DSN.
    """

    def __init__(
        self, message: str, *, store: str, pooled: bool | None, listen_target: str
    ) -> None:
        super().__init__(message, sqlstate=None, store=store, transient=False, may_have_run=False)
        self.pooled = pooled
        self.listen_target = listen_target


class StoreConflictError(StoreError):
    """A write found a row already at its path, written by a different request (a verdict).

    Args:
        message: what happened.
        path: the contested path.
        existing_request_id: the request id stored with the existing row.
        store: a printable name of the store.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        existing_request_id: str | None = None,
        store: str | None = None,
    ) -> None:
        super().__init__(message, sqlstate="23505", store=store)
        self.path = path
        self.existing_request_id = existing_request_id


class StoreVersionConflictError(StoreError):
    """A compare-and-set update, delete or move found the row at another version (a verdict).

    Another write came first: the row is not at the version (or not by the write) the request was
    based on, and nothing was changed. Never a "could not reach" fault (``sqlstate`` ``None``).

    Args:
        message: what happened.
        path: the contested path.
        expected_version: the version the request was based on.
        actual_version: the row's version now (``None``: the row is gone).
        actual_request_id: the request id of the write that left the row as it is now.
        store: a printable name of the store.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        expected_version: int,
        actual_version: int | None,
        actual_request_id: str | None = None,
        store: str | None = None,
    ) -> None:
        super().__init__(message, sqlstate=None, store=store)
        self.path = path
        self.expected_version = expected_version
        self.actual_version = actual_version
        self.actual_request_id = actual_request_id


class QueryProviderStalledError(RxMeshError):
    """A query's Initial gate fired before every provider answered.

    Deliberately not a ``TimeoutError``: it must not enter the retry classes of the ladder.

    Args:
        providers: the providers that had not delivered their Initial frame.
        budget: the Initial budget in seconds.
        query: a printable description of the query.
    """

    def __init__(self, providers: Sequence[str], budget: float, query: object = None) -> None:
        self.providers: tuple[str, ...] = tuple(providers)
        self.budget = budget
        self.query = query
        names = ", ".join(repr(p) for p in self.providers)
        super().__init__(
            f"query {query!r}: provider(s) {names} did not deliver an Initial frame within "
            f"{budget:g}s"
        )


class DeliveryErrorType(StrEnum):
    """Why a message was not delivered, as a responding side (or the transport) reports it.

    - ``FAILED``: the request failed; only with one of the transport's two timeout phrases is it
      "no answer in time" (:func:`rxmesh.faults.is_no_answer_in_time`), otherwise it is an answer.
    - ``NOT_FOUND``: a verdict: something that knows every hub (the in-process transport, a hub
      without that handler, a hub that does not forward) says nothing serves the address.
    - ``FORBIDDEN``, ``UNAVAILABLE``, ``SHUTTING_DOWN``: verdicts (access denied, the store was
      unreachable, the hub is closing).
    - ``NO_RESPONDERS``: nobody was there to answer, and the transport cannot tell why (NATS's
      "no responders": no hub ever serves it, or its process is down, or it has not re-subscribed
      after a reconnect). An availability failure, not a verdict:
      :func:`rxmesh.faults.is_coordination_unreachable` matches it, ``is_no_answer_in_time`` does
      not (nothing timed out).
    """

    FAILED = "FAILED"
    NOT_FOUND = "NOT_FOUND"
    FORBIDDEN = "FORBIDDEN"
    UNAVAILABLE = "UNAVAILABLE"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    NO_RESPONDERS = "NO_RESPONDERS"


class DeliveryFailure(RxMeshError):
    """A NACK: the responding side flattened its exception into a type and a text.

    Exception objects never cross a messaging boundary; this is what arrives instead.
    """

    def __init__(self, error_type: DeliveryErrorType | str, message: str) -> None:
        self.error_type = DeliveryErrorType(error_type)
        self.message = message
        super().__init__(f"{self.error_type.value}: {message}")


class BuildCoordinationUnreachableError(RxMeshError):
    """The build-claim handshake got no answer in time, or nobody answering (a NO_RESPONDERS
    :class:`DeliveryFailure`), every attempt; nothing was verified."""


class MalformedWitnessRecordError(RxMeshError, ValueError):
    """A durable-witness record exists but says nothing readable: not a verdict, and not an
    absence (see :mod:`rxmesh.nodetypes.prewarm`)."""


class JournalError(RxMeshError):
    """The pending-write journal cannot be used: an unsafe directory, or a write that failed.

    Args:
        message: what happened, naming the directory or file.
        path: the directory or file concerned.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PendingWriteHeldError(RxMeshError):
    """A pending-write ledger refused an intent: another requester's intent for the same path is
    outstanding (pending, or taken for re-issue and not settled).

    One requester's intent is never displaced by another's: the first one stands and is
    re-issued; the refused one is not recorded, and its answer must say it will not be re-issued.

    Args:
        message: what happened, naming the path.
        path: the contested node path.
        holder_request_id: the ``request_id`` of the intent that stands.
    """

    def __init__(self, message: str, *, path: str, holder_request_id: str) -> None:
        super().__init__(message)
        self.path = path
        self.holder_request_id = holder_request_id


class MeshDisposedError(RxMeshError):
    """The mesh was disposed by its owner; nothing more will be answered."""


class SlowConsumerError(RxMeshError):
    """An ``async for`` over a stream (:func:`rxmesh.aio.iterate`) fell ``max_pending`` items
    behind it; the subscription was disposed then, and the items already pending were delivered
    before this was raised. Query frames never cause it: they are coalesced."""


class DrillSetupError(RxMeshError):
    """The drill could not begin: its store did not start (a missing database, an unknown role,
    a DSN that is not PostgreSQL's, a server that does not answer). The cause is chained; nothing
    of the drill ran, so no invariant was judged."""


class NodeOperationError(RxMeshError):
    """A node operation failed for an unexpected reason (UNKNOWN); base of all verb errors.

    Args:
        message: the answer's text.
        path: the node path concerned, when there is one.

    Raised by the mesh's in-process verbs, it also carries what the answer said:
    ``reason`` (the :class:`~rxmesh.operations.RejectionReason`), ``request_id``,
    ``recorded_for_reissue`` and ``outcome_unknown`` (``None`` / ``False`` elsewhere).
    """

    reason: str | None = None
    request_id: str | None = None
    recorded_for_reissue: bool = False
    outcome_unknown: bool = False

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StoreUnavailableError(NodeOperationError):
    """UNAVAILABLE: the store could not be reached; nothing was written; re-issue is meaningful."""


class NodeExistsError(NodeOperationError):
    """NODE_ALREADY_EXISTS: a node is already at that path (written by another request)."""


class NodeVersionConflictError(NodeOperationError):
    """VERSION_CONFLICT: another write came first; the node is not at the version the update,
    delete or move was based on (its ``expected_version``), and nothing was changed. Read the
    node again and decide; re-issuing the same request cannot succeed."""


class NodeAccessDeniedError(NodeOperationError, PermissionError):
    """FORBIDDEN: the requester holds no grant for this operation (a verdict)."""


class NodeValidationError(NodeOperationError, ValueError):
    """VALIDATION_FAILED: the request was evaluated and is invalid.

    This is the *validation-refusal type* the terminal arms test for (after the unreachable rule).
    """


class InvalidPathError(NodeValidationError):
    """INVALID_PATH: the path breaks the path rules; the message names it."""


class InvalidNodeTypeError(NodeValidationError):
    """INVALID_NODE_TYPE: the node type is unknown to the mesh."""
