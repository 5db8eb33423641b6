"""What every job of the mesh shares: the store and its one retry ladder, the policy, the content
rules, the ledger, and the checks that need no store.

:class:`MeshCore` is built once by :class:`~rxmesh.mesh.Mesh` and handed to each job (the create,
the bulk, the verbs, the partitions' bootstrap, the pending writes and the terminal arm). Its
three methods named ``ask`` are the one door to the store's verbs: :meth:`MeshCore.ask` (one
call through the retry ladder, the only place the mesh retries), :meth:`MeshCore.ask_stream`
(a streamed call, the bulk's windows, through the same ladder) and :meth:`MeshCore.ask_once`
(one call and no retry: what a fault path asks before the terminal arm answers).
``tests/mesh/test_store_door.py`` holds every module of the mesh to it.

The mesh's two subscriptions are not verbs and keep their own drivers: a live query goes through
:func:`~rxmesh.operators.fan_in` (the ladder before its Initial), and the partition facts' cache
watches the change feed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from reactivex import Observable, abc
from reactivex.subject import Subject

from rxmesh._util.trusted import fields_of, trusted
from rxmesh.exceptions import NodeAccessDeniedError, NodeValidationError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh._access import AccessPolicy
from rxmesh.model import (
    MAX_CONTENT_BYTES,
    AccessContext,
    MeshNode,
    validate_content,
)
from rxmesh.model._rules import content_certainly_fits
from rxmesh.operators import retry_transient_connect
from rxmesh.operators._ladder import Ladder
from rxmesh.providers import Store

__all__ = ["MeshCore", "NodeTypeValidator", "Validator", "now", "stamp"]

Validator = Callable[[MeshNode, AccessContext], None]
"""A content rule: raise :class:`~rxmesh.exceptions.NodeValidationError` to refuse a node."""


class NodeTypeValidator(Protocol):
    """Resolves a node's type and validates its content against it (e.g. baked NodeType records).

    Raise :class:`~rxmesh.exceptions.InvalidNodeTypeError` for an unknown type and
    :class:`~rxmesh.exceptions.NodeValidationError` naming the field for bad content.
    """

    def validate(self, node: MeshNode) -> None:
        """Validate ``node`` or raise."""
        ...


async def _noting(
    failed: Callable[[BaseException], object],
    verb: Callable[..., Coroutine[Any, Any, Any]],
    args: tuple[Any, ...],
) -> Any:
    """``verb(*args)`` awaited, telling ``failed`` of its error before it propagates."""
    try:
        return await verb(*args)
    except Exception as failure:
        failed(failure)
        raise


def now() -> datetime:
    """The time a write is stamped with."""
    return datetime.now(UTC)


_ALL_FIELDS = fields_of(MeshNode)
"""Shared by every stamped node (pydantic copies a fields set before a copy updates it)."""


def stamp(node: MeshNode, user: str, at: datetime, request_id: str | None) -> MeshNode:
    """``node`` as the mesh writes it: ``created_by``, ``created_at``, ``version`` (at least 1)
    and ``request_id`` set. What ``node.model_copy(update=...)`` makes (the values are the
    mesh's own, already valid), without its three copies per node: a 10k bulk stamps in one go.
    """
    values = node.__dict__.copy()
    values["created_by"] = user
    values["created_at"] = at
    version = node.version
    values["version"] = version if version > 1 else 1  # max(1, version), without the call
    values["request_id"] = request_id
    return trusted(MeshNode, values, _ALL_FIELDS)


class MeshCore:
    """The state and the store-free checks every job of one mesh uses."""

    def __init__(
        self,
        store: Store,
        *,
        policy: AccessPolicy,
        validators: tuple[Validator, ...],
        ledger: PendingWriteLedger,
        node_types: NodeTypeValidator | None,
        record_pending_writes: bool,
        scheduler: abc.SchedulerBase | None,
        retry_delays: Sequence[float],
    ) -> None:
        self.store = store
        self.policy = policy
        self.validators = validators
        self.ledger = ledger
        self.node_types = node_types
        self.record_pending_writes = record_pending_writes
        self.scheduler = scheduler
        self.ladder = Ladder.of(tuple(retry_delays))
        self._retry = retry_transient_connect(tuple(retry_delays), scheduler=scheduler)
        self.created: Subject[MeshNode] = Subject()

    def ask(
        self,
        operation: str,
        *args: Any,
        failed: Callable[[BaseException], object] | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """One store call (``"read"``, ``"write"``, ...) through the retry ladder: the only place
        the mesh retries. Each try awaits the store's verb anew. ``failed(error)`` is told of
        each try that fails, retried or not (a create asks whether a failed write may have
        landed).

        Returns the ladder's coroutine itself (to be awaited), and passes a partial, not a
        lambda: a call waiting in the ladder holds no frame and no closure of its own."""
        verb = getattr(self.store, operation)
        if failed is None:
            attempt = functools.partial(verb, *args)
        else:
            attempt = functools.partial(_noting, failed, verb, args)
        return self.ladder.call(attempt, scheduler=self.scheduler)

    def ask_stream(self, operation: str, *args: Any) -> Observable[Any]:
        """A store call that streams (``"write_many"``: a window at a time), through the same
        ladder's stream driver: retried only before its first item, as a window that committed
        is never written again."""
        source: Observable[Any] = getattr(self.store, operation)(*args)
        return source.pipe(self._retry)

    def ask_once(self, operation: str, *args: Any) -> Coroutine[Any, Any, Any]:
        """One store call and no retry: what a fault path asks before the terminal arm answers
        (which never retries); its error propagates to the caller."""
        verb: Callable[..., Coroutine[Any, Any, Any]] = getattr(self.store, operation)
        return verb(*args)

    def requester(self, access: AccessContext | None, node: MeshNode | None) -> AccessContext:
        """Who asks: the access, else the node's ``created_by``; nobody is refused FORBIDDEN."""
        if access is not None:
            return access
        if node is not None and node.created_by:
            return AccessContext(user=node.created_by)
        raise NodeAccessDeniedError(
            "the request names no requester (neither access nor node.created_by)"
        )

    def requester_or_none(
        self, access: AccessContext | None, node: MeshNode | None
    ) -> AccessContext | None:
        """:meth:`requester`, or ``None`` where the request names nobody (for the journal)."""
        try:
            return self.requester(access, node)
        except NodeAccessDeniedError:
            return None

    def fail_fast(self, node: MeshNode, access: AccessContext | None) -> None:
        """Checks that need no store: type/content presence, content size.

        Content is judged in one walk (:func:`~rxmesh.model._rules.content_certainly_fits`)
        and, unless that finds it certainly storable and small enough, by
        :func:`~rxmesh.model.validate_content` and its exact size as JSON (which names why).

        The path (reserved segments are the system's) was checked when the request was parsed
        (:func:`rxmesh.mesh._requests.check_strings`, every verb's entry point), with the same
        requester: it is not checked again here.
        """
        if node.node_type is None and node.content is None:
            raise NodeValidationError(
                f"node '{node.path}' has neither a node_type nor content", path=node.path
            )
        content = node.content
        if content is not None and not content_certainly_fits(content):
            # The rules themselves (the shortcut said "not certainly"): they decide, and the
            # refusal is named by the rule that refuses.
            validate_content(node.path, content)
            size = len(json.dumps(node.content, ensure_ascii=False, allow_nan=False).encode())
            if size > MAX_CONTENT_BYTES:
                raise NodeValidationError(
                    f"node '{node.path}': content is {size} bytes; at most {MAX_CONTENT_BYTES}",
                    path=node.path,
                )

    def validate_content(self, node: MeshNode, access: AccessContext) -> None:
        """The mesh's content rules, then the node type's (each raises to refuse)."""
        for validator in self.validators:
            validator(node, access)
        if self.node_types is not None and node.node_type is not None:
            self.node_types.validate(node)
