"""NodeType records, baked into pydantic models at run time, and the registry the mesh consults.

A NodeType record is a node whose ``node_type`` is ``"NodeType"``; its ``content`` describes one
node type (see docs/node-types.md)::

    {
      "name": "Invoice",                       # the type name nodes carry in ``node_type``
      "description": "A bill we sent",         # optional
      "fields": {
        "amount":   {"type": "number", "required": true},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "lines":    {"type": "array"}
      },
      "extra": "forbid"                        # or "allow": keys not listed in ``fields``
    }

Field types: ``string``, ``integer``, ``number`` (an integer or a float), ``boolean``, ``object``,
``array``, ``any``. Validation is strict (``"12"`` is not a number, ``true`` is not an integer):
the mesh stores content as given, so nothing is coerced. A field that is not ``required`` may be
absent or ``null``.

The type is keyed by ``content.name``, not by the record's path: a record may live anywhere and be
renamed ("re-keyed") by updating its ``name``. Two records claiming one name: the record whose
path sorts first defines it; the other is reported and shadowed.

:func:`bake` compiles one record (``pydantic.create_model``). :class:`NodeTypeRegistry` holds the
baked types and implements the mesh's ``NodeTypeValidator``; a malformed record is reported
(WARNING naming its path) and counted, never fatal to the others.

The layout: this module holds the registry; ``_specs`` compiles a record into a model;
``census`` the standing watch over the records; ``prewarm`` the sweep that bakes them at boot.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loguru import logger

from rxmesh.exceptions import InvalidNodeTypeError, NodeValidationError
from rxmesh.model import NODE_TYPE_NODE_TYPE, FrameKind, MeshNode, QueryFrame
from rxmesh.nodetypes._specs import BakedNodeType as BakedNodeType
from rxmesh.nodetypes._specs import FieldSpec, FieldType, NodeTypeSpec, bake, parse_spec
from rxmesh.nodetypes._specs import (
    describe_validation_error as describe_validation_error,
)

__all__ = [
    "FieldSpec",
    "FieldType",
    "NodeTypeRegistry",
    "NodeTypeSpec",
    "bake",
]


@dataclass(frozen=True, slots=True)
class RegistryChange:
    """What one :meth:`NodeTypeRegistry.apply` (or ``bake_all``) changed.

    Attributes:
        baked: type names baked or re-baked (new or changed records).
        dropped: type names no longer defined (record removed, renamed away, or now malformed).
        malformed: paths of records that could not be baked.
        unchanged: records seen again with nothing changed (not re-baked).
    """

    baked: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    malformed: tuple[str, ...] = ()
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        """Whether the set of known types or their definitions changed."""
        return bool(self.baked or self.dropped)


@dataclass(frozen=True, slots=True)
class NodeTypeRegistryStatistics:
    """A snapshot of a :class:`NodeTypeRegistry`.

    Attributes:
        types: type names defined now.
        records: NodeType records held (baked), shadowed duplicates included.
        malformed: records currently malformed (not baked).
        malformed_paths: their paths.
        shadowed: records whose name another record (sorting first) already defines.
        bakes: records baked since the registry was built (re-bakes included).
        malformed_seen: malformed records reported since the registry was built.
        validations: nodes validated.
        refusals: nodes refused (unknown type or bad content).
        strict: whether unknown types are refused.
    """

    types: int
    records: int
    malformed: int
    malformed_paths: tuple[str, ...]
    shadowed: int
    bakes: int
    malformed_seen: int
    validations: int
    refusals: int
    strict: bool


class NodeTypeRegistry:
    """The baked node types; the mesh's ``NodeTypeValidator``.

    ``validate(node)``: a node without a type, or of the built-in type ``"NodeType"`` (its content
    is checked against the NodeType schema, so a malformed record is refused at create), or of a
    baked type (its content is validated) passes or raises :class:`NodeValidationError` naming the
    field(s). A type no record defines is refused with :class:`InvalidNodeTypeError` when
    ``strict``; when not strict (the default, for meshes that do not model their types) it is
    accepted unchecked.

    Safe to share between the asyncio loop and other threads: state is swapped under a lock and
    baking happens outside it.

    Args:
        records: NodeType records to bake now (as :meth:`bake_all`).
        strict: refuse node types that no NodeType record defines.

    Example:
        >>> record = MeshNode(path="types/Note", node_type="NodeType",
        ...     content={"name": "Note", "fields": {"text": {"type": "string", "required": True}}})
        >>> registry = NodeTypeRegistry([record], strict=True)
        >>> registry.names()
        ('Note',)
        >>> registry.validate(MeshNode(path="p/n", node_type="Note", content={"text": 1}))
        Traceback (most recent call last):
        ...
        rxmesh.exceptions.NodeValidationError: node 'p/n' of type 'Note': content.text: Input should be a valid string
    """  # noqa: E501

    def __init__(self, records: Iterable[MeshNode] = (), *, strict: bool = False) -> None:
        self.strict = strict
        self._lock = threading.RLock()
        self._records: dict[str, BakedNodeType] = {}  # by record path
        self._malformed: dict[str, MeshNode] = {}  # by record path
        self._by_name: Mapping[str, BakedNodeType] = {}
        self._shadowed: set[str] = set()
        self._bakes = 0
        self._malformed_seen = 0
        self._validations = 0
        self._refusals = 0
        records = tuple(records)
        if records:
            self.bake_all(records)

    # -- the validator ------------------------------------------------------------------------

    def validate(self, node: MeshNode) -> None:
        """Validate ``node``'s type and content, or raise.

        Raises:
            InvalidNodeTypeError: ``strict`` and no record defines ``node.node_type``.
            NodeValidationError: the content does not fit the type, naming the field(s).
        """
        with self._lock:
            self._validations += 1
            baked = self._by_name.get(node.node_type) if node.node_type is not None else None
        try:
            if node.node_type is None:
                return
            if node.node_type == NODE_TYPE_NODE_TYPE:
                parse_spec(node)
                return
            if baked is None:
                if self.strict:
                    known = ", ".join(repr(name) for name in self.names()) or "none"
                    raise InvalidNodeTypeError(
                        f"node '{node.path}': unknown node type {node.node_type!r}: no NodeType "
                        f"record defines it (known: {known})",
                        path=node.path,
                    )
                return
            baked.validate_content(node.content, path=node.path)
        except NodeValidationError:
            with self._lock:
                self._refusals += 1
            raise

    # -- baking -------------------------------------------------------------------------------

    def bake_all(self, records: Iterable[MeshNode]) -> RegistryChange:
        """Make ``records`` the complete set of NodeType records (a snapshot).

        Records not among them are dropped; unchanged ones are not re-baked; malformed ones are
        reported (WARNING naming the path) and counted, and the others bake.
        """
        snapshot = {record.path: record for record in records}
        with self._lock:
            gone = [path for path in (*self._records, *self._malformed) if path not in snapshot]
        return self._update(snapshot.values(), gone)

    def apply(self, frame: QueryFrame) -> RegistryChange:
        """Follow one frame of the NodeType query: an Initial replaces, a Delta upserts/removes."""
        if frame.kind is FrameKind.INITIAL:
            return self.bake_all(frame.nodes)
        return self._update(frame.nodes, frame.removed)

    def _update(self, upserts: Iterable[MeshNode], removed: Iterable[str]) -> RegistryChange:
        unchanged = 0
        fresh: dict[str, BakedNodeType] = {}
        broken: dict[str, MeshNode] = {}
        with self._lock:
            held = dict(self._records)
            held_malformed = dict(self._malformed)
        for record in upserts:
            current = held.get(record.path)
            if current is not None and current.record == record:
                unchanged += 1
                continue
            if held_malformed.get(record.path) == record:
                unchanged += 1  # still malformed; already reported
                continue
            try:
                fresh[record.path] = bake(record)
            except NodeValidationError as exc:
                broken[record.path] = record
                logger.bind(record=record.path, error=str(exc)).warning(
                    "NodeType record '{}' is malformed and was not baked: {}", record.path, exc
                )
        with self._lock:
            before = self._by_name
            for path in removed:
                self._records.pop(path, None)
                self._malformed.pop(path, None)
            for path, baked in fresh.items():
                self._records[path] = baked
                self._malformed.pop(path, None)
            for path, record in broken.items():
                self._records.pop(path, None)
                self._malformed[path] = record
            self._bakes += len(fresh)
            self._malformed_seen += len(broken)
            after = self._index()
            self._by_name = after
        baked_names = sorted(name for name, baked in after.items() if before.get(name) is not baked)
        dropped = sorted(name for name in before if name not in after)
        change = RegistryChange(
            baked=tuple(baked_names),
            dropped=tuple(dropped),
            malformed=tuple(sorted(broken)),
            unchanged=unchanged,
        )
        if change.changed:
            logger.bind(baked=list(change.baked), dropped=list(change.dropped)).info(
                "node types changed: baked {}, dropped {}",
                list(change.baked),
                list(change.dropped),
            )
        return change

    def _index(self) -> dict[str, BakedNodeType]:
        """Type name -> the record sorting first that defines it (lock held)."""
        index: dict[str, BakedNodeType] = {}
        shadowed: set[str] = set()
        for path in sorted(self._records):
            baked = self._records[path]
            winner = index.get(baked.name)
            if winner is None:
                index[baked.name] = baked
                continue
            shadowed.add(path)
            if path in self._shadowed:
                continue  # reported when it was first shadowed
            logger.bind(record=path, name=baked.name, defined_by=winner.path).warning(
                "NodeType record '{}' is shadowed: type {!r} is already defined by '{}'",
                path,
                baked.name,
                winner.path,
            )
        self._shadowed = shadowed
        return index

    # -- introspection ------------------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        """The type names defined now, sorted (the built-in ``"NodeType"`` is not listed)."""
        with self._lock:
            return tuple(sorted(self._by_name))

    def get(self, name: str) -> BakedNodeType | None:
        """The baked type called ``name``, or ``None``."""
        with self._lock:
            return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._by_name

    def statistics(self) -> NodeTypeRegistryStatistics:
        """A frozen snapshot of the registry's counters."""
        with self._lock:
            return NodeTypeRegistryStatistics(
                types=len(self._by_name),
                records=len(self._records),
                malformed=len(self._malformed),
                malformed_paths=tuple(sorted(self._malformed)),
                shadowed=len(self._shadowed),
                bakes=self._bakes,
                malformed_seen=self._malformed_seen,
                validations=self._validations,
                refusals=self._refusals,
                strict=self.strict,
            )
