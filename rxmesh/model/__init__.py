"""Pydantic models of the mesh: nodes, access, queries, frames and change-feed evidence.

Path rules (one place, used by every layer): a path is ``/``-separated segments of
``[A-Za-z0-9._-]``; ``.`` and ``..`` are not segments; a segment starting with ``_`` is reserved for
system records (``<partition>/_access/<user>``, ``<partition>/_owner``); at most
:data:`MAX_PATH_DEPTH` segments, :data:`MAX_SEGMENT_LENGTH` characters a segment and
:data:`MAX_PATH_LENGTH` in all. The partition is the first segment; it may not be reserved and is
at most :data:`MAX_PARTITION_LENGTH` characters (it names a database schema).

Identity and id rules (docs/requests.md says why): a user id (:func:`validate_user_id`) is a valid,
non-reserved path segment, because it names the grant ``<partition>/_access/<user>``; a request id
(:func:`validate_request_id`) and an ``on_behalf_of`` label (:func:`validate_label`) are text of
bounded length without NUL, lone surrogates or control characters. Fields of a stored
:class:`MeshNode` (``created_by``, ``request_id``) only refuse what no store can keep (NUL, lone
surrogates) and over-long text, so an existing row always reads back.

The layout: this module holds the models; ``_rules`` the path, identity and content rules they
and the other layers check; ``_filters`` the content filters of a :class:`NodeQuery` (the language,
its canonical form and its Python evaluator); ``_order`` the order of an ordered window
(``NodeQuery.order_by`` and ``limit``: one total order over JSON values, then the path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    JsonValue,
    StringConstraints,
    WithJsonSchema,
)

from rxmesh.model._filters import Filter as Filter
from rxmesh.model._filters import and_, field, not_, or_
from rxmesh.model._order import check_limit, parse_order, sort_key
from rxmesh.model._rules import (
    MAX_CONTENT_BYTES as MAX_CONTENT_BYTES,
)
from rxmesh.model._rules import (
    MAX_CONTENT_DEPTH as MAX_CONTENT_DEPTH,
)
from rxmesh.model._rules import (
    MAX_CONTENT_INT_DIGITS as MAX_CONTENT_INT_DIGITS,
)
from rxmesh.model._rules import (
    MAX_LABEL_LENGTH as MAX_LABEL_LENGTH,
)
from rxmesh.model._rules import (
    MAX_PATH_LENGTH as MAX_PATH_LENGTH,
)
from rxmesh.model._rules import (
    MAX_REQUEST_ID_LENGTH as MAX_REQUEST_ID_LENGTH,
)
from rxmesh.model._rules import (
    MAX_SEGMENT_LENGTH as MAX_SEGMENT_LENGTH,
)
from rxmesh.model._rules import (
    MAX_USER_ID_LENGTH,
    _label_problem,
    _request_id_problem,
    _text_problem,
    _user_id_problem,
    validate_content,
    validate_path,
)
from rxmesh.model._rules import (
    is_reserved_path as is_reserved_path,
)
from rxmesh.model._rules import (
    partition_of as partition_of,
)
from rxmesh.model._rules import (
    validate_label as validate_label,
)
from rxmesh.model._rules import (
    validate_request_id as validate_request_id,
)
from rxmesh.model._rules import (
    validate_stored_text as validate_stored_text,
)
from rxmesh.model._rules import (
    validate_user_id as validate_user_id,
)

__all__ = [
    "AccessContext",
    "FrameKind",
    "MeshNode",
    "NodeQuery",
    "QueryFrame",
    "and_",
    "field",
    "not_",
    "or_",
    "validate_content",
    "validate_path",
]

NODE_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_.:-]{0,127}$"
"""A node type name: a letter, then letters, digits, ``_ . : -``; at most 128 characters."""

SYSTEM_USER = "system"
"""The system identity: it may do anything."""

NODE_TYPE_NODE_TYPE = "NodeType"
"""The node type of NodeType records (their content defines the fields of a node type)."""


def _check_path(value: str) -> str:
    return validate_path(value, allow_reserved=True)


def _pydantic(problem_of: Callable[[object], str | None]) -> Callable[[str], str]:
    """An after-validator raising ``ValueError(problem)``; pydantic names the field."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return check


NodePath = Annotated[str, AfterValidator(_check_path)]
"""A path obeying the path rules (reserved segments allowed; the mesh decides who may use them)."""
_TEXT_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]*$"
"""JSON Schema for published text fields: no control characters (a schema cannot say "no lone
surrogate"; JSON text that holds one is refused naming the field all the same)."""
_USER_ID_PATTERN = rf"^(?!\.\.?$)(?!_)[A-Za-z0-9._-]{{1,{MAX_USER_ID_LENGTH}}}$"
UserId = Annotated[
    str,
    AfterValidator(_pydantic(_user_id_problem)),
    WithJsonSchema({"type": "string", "pattern": _USER_ID_PATTERN}),
]
"""A user id (see :func:`validate_user_id`)."""
RequestId = Annotated[
    str,
    AfterValidator(_pydantic(_request_id_problem)),
    WithJsonSchema({"type": "string", "pattern": _TEXT_PATTERN, "minLength": 1, "maxLength": 128}),
]
"""A request id (see :func:`validate_request_id`)."""
Label = Annotated[
    str,
    AfterValidator(_pydantic(_label_problem)),
    WithJsonSchema({"type": "string", "pattern": _TEXT_PATTERN, "maxLength": MAX_LABEL_LENGTH}),
]
"""An identity label (see :func:`validate_label`)."""
StoredUser = Annotated[
    str,
    AfterValidator(
        _pydantic(lambda v: _text_problem(v, max_length=MAX_LABEL_LENGTH, control=False))
    ),
]
"""``created_by`` as a store keeps it: storable text of at most :data:`MAX_LABEL_LENGTH`."""
StoredRequestId = Annotated[
    str,
    AfterValidator(
        _pydantic(lambda v: _text_problem(v, max_length=MAX_REQUEST_ID_LENGTH, control=False))
    ),
]
"""A row's ``request_id`` as a store keeps it: storable text of at most 128 characters."""


class MeshNode(BaseModel):
    """A node of the mesh, as stored.

    Args:
        path: where the node lives: ``<partition>/<segment>/...`` (see docs/requests.md).
        node_type: the name of its NodeType, or ``None`` for an untyped node.
        content: its JSON content (integers of at most ``MAX_CONTENT_INT_DIGITS`` digits; no
            NaN or infinity).
        created_by: the user whose request wrote it (set by the mesh).
        created_at: when it was first written (set by the store; ``None`` when the store holds
            a time Python cannot).
        version: 0 until the mesh stamps the node, then 1 and up, one per write.
        request_id: the id of the request whose write produced this version, kept with the row
            so an ambiguous commit can be recognised.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: NodePath
    node_type: Annotated[str, StringConstraints(pattern=NODE_TYPE_PATTERN)] | None = None
    content: JsonValue = None
    created_by: StoredUser | None = None
    created_at: datetime | None = None
    version: int = Field(default=0, ge=0)
    request_id: StoredRequestId | None = None

    @property
    def partition(self) -> str:
        """The node's partition (first path segment)."""
        return partition_of(self.path)


class AccessContext(BaseModel):
    """Who a request is delivered on behalf of; used to authorise it (and its re-issue).

    ``user`` is a user id (:func:`validate_user_id`: a non-reserved path segment, since it names
    the grant ``<partition>/_access/<user>``); ``on_behalf_of`` is a label
    (:func:`validate_label`), kept with a pending write and shown in logs.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: UserId
    on_behalf_of: Label | None = None

    @classmethod
    def system(cls) -> AccessContext:
        """The system identity, which may do anything."""
        return cls(user=SYSTEM_USER)

    @property
    def is_system(self) -> bool:
        """Whether this is the system identity."""
        return self.user == SYSTEM_USER


def _check_order_by(value: object) -> tuple[str, ...]:
    parse_order(value)
    return tuple(value)  # type: ignore[arg-type]


class NodeQuery(BaseModel):
    """A query for nodes: every node under ``path_prefix`` (optionally of one ``node_type``,
    optionally only those whose content satisfies ``where``).

    Frozen and hashable, so it keys the synced-query cache; a :class:`Filter` is in canonical form,
    so two queries with equal filters are one key. Build ``where`` with :func:`field`,
    :func:`and_`, :func:`or_` and :func:`not_` (docs/live-queries.md, "Content filters").

    With ``order_by`` or ``limit`` it is an ordered window (docs/live-queries.md, "Ordered
    windows"): the first ``limit`` matches in the order of ``order_by`` (dotted content field
    paths, a leading ``-`` for descending; ties, and a window with no ``order_by``, by path).
    ``limit`` is 1 to 10,000; ``order_by`` names at most 8 fields, each a field path as a
    filter's is. Both are checked here, refused naming the input.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: str | None = None
    path_prefix: str = ""
    node_type: str | None = None
    where: InstanceOf[Filter] | None = None
    order_by: Annotated[tuple[str, ...], BeforeValidator(_check_order_by)] = ()
    limit: Annotated[int | None, BeforeValidator(lambda v: v if v is None else check_limit(v))] = (
        None
    )

    def sort_key(self, node: MeshNode) -> tuple[object, ...]:
        """A key whose order is this query's order (``order_by``, then the path): the nodes of a
        window are the first ``limit`` matches by it."""
        return sort_key(self.order_by, node.content, node.path)

    def matches(self, node: MeshNode) -> bool:
        """Whether ``node`` belongs to this query's result."""
        if self.partition is not None and node.partition != self.partition:
            return False
        prefix = self.path_prefix.rstrip("/")
        if prefix and not (node.path == prefix or node.path.startswith(prefix + "/")):
            return False
        if self.node_type is not None and node.node_type != self.node_type:
            return False
        return self.where is None or self.where.matches(node.content)


class FrameKind(StrEnum):
    """An Initial frame (a snapshot) or a Delta (changes since)."""

    INITIAL = "INITIAL"
    DELTA = "DELTA"


class QueryFrame(BaseModel):
    """One frame of a live query: the Initial snapshot, then deltas.

    ``silent_providers`` names providers whose Initial was not a real answer (completed without
    one, or flagged ``snapshot_incomplete``); such a frame is delivered but never cached.

    ``resume_token`` is where the view stands after this frame in its store's change order
    (opaque text; ``None`` where no single store's position applies, e.g. a merge of several
    stores). A stream opened with ``resume_from=<token>`` answers first with either a Delta of
    what changed since (``resumed``: apply it to the view the token was taken from) or, when the
    store can no longer tell (the token too old, from another store), an Initial marked
    ``reset`` (replace what you hold). docs/live-queries.md, "Resume tokens".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FrameKind
    nodes: tuple[MeshNode, ...] = ()
    removed: tuple[str, ...] = ()
    silent_providers: tuple[str, ...] = ()
    snapshot_incomplete: bool = False
    provider: str | None = None
    resume_token: str | None = None
    resumed: bool = False
    reset: bool = False

    @classmethod
    def initial(
        cls, nodes: Sequence[MeshNode], *, provider: str | None = None, incomplete: bool = False
    ) -> QueryFrame:
        """An Initial frame of ``nodes``, ordered by path. (An ordered window's Initial is in
        the window's order instead: its store builds the frame with the nodes as they are.)"""
        ordered = tuple(sorted(nodes, key=lambda n: n.path))
        return cls(
            kind=FrameKind.INITIAL, nodes=ordered, provider=provider, snapshot_incomplete=incomplete
        )

    @classmethod
    def delta(
        cls,
        nodes: Sequence[MeshNode] = (),
        removed: Sequence[str] = (),
        *,
        provider: str | None = None,
    ) -> QueryFrame:
        """A Delta frame: nodes added or changed, paths removed."""
        return cls(
            kind=FrameKind.DELTA, nodes=tuple(nodes), removed=tuple(removed), provider=provider
        )


class NodeChange(BaseModel):
    """One committed change, as a store's change feed reports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    op: Literal["upsert", "delete"]
    path: str
    version: int = 0
    node: MeshNode | None = None


class ChangeFeedGap(BaseModel):
    """The change feed was lost and has resumed: changes in between may have been missed.

    Declared only after the listener is back (re-LISTENed), never for the first LISTEN. It is
    evidence that the store answers again.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    lost_at: datetime
    resumed_at: datetime
    reason: str


class CommitAnnounced(BaseModel):
    """The store announced a commit (a NOTIFY arrived): evidence that it answers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    path: str
    version: int = 0


StoreEvidence = ChangeFeedGap | CommitAnnounced
"""A piece of evidence that the store answers again."""


class WindowCommitted(BaseModel):
    """One window of a bulk write committed (its own transaction) in one partition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: str
    index: int
    paths: tuple[str, ...]
