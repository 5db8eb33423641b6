"""The order of an ordered window: one total order over JSON values, then the path.

Private: :class:`~rxmesh.model.NodeQuery` checks ``order_by`` and ``limit`` with
:func:`parse_order` and :func:`check_limit`, and its :meth:`~rxmesh.model.NodeQuery.sort_key`
is :func:`sort_key`. docs/live-queries.md ("Ordered windows") states the order; a store that
orders in its own language (PostgreSQL, in SQL) must agree with :func:`sort_key` on every content
(the ranks below, numbers exact, strings by code point).

The order of one field, ascending: absent (the path leads nowhere) and ``null`` first, as equals;
then numbers (numerically, exactly), strings (by code point), booleans (false, true), arrays,
objects (arrays among themselves are equal, objects too). A descending field is that order
reversed. Fields compare in ``order_by``'s order; nodes equal on every field are ordered by path
(ascending, by code point), so the order is total and a window is one well-defined set.
"""

from __future__ import annotations

import functools
from decimal import Decimal

from rxmesh.exceptions import NodeValidationError
from rxmesh.model._filters import _kind_of, _parse_path, lookup

__all__ = [
    "MAX_ORDER_FIELDS",
    "MAX_WINDOW_LIMIT",
    "RANKS",
    "OrderTerm",
    "check_limit",
    "parse_order",
    "sort_key",
    "term_value",
]

MAX_ORDER_FIELDS = 8
"""Most fields of one ``order_by``."""
MAX_WINDOW_LIMIT = 10_000
"""Largest ``limit`` of a window: its members are held in memory by every subscription."""

RANKS: dict[str, int] = {
    "missing": 0,
    "null": 0,
    "number": 1,
    "string": 2,
    "boolean": 3,
    "array": 4,
    "object": 5,
}
"""The JSON types in their order (absent and ``null`` are one rank: both mean "no value")."""

OrderTerm = tuple[tuple[str, ...], bool]
"""One field of an order: its path's segments, and whether it is descending."""


def _refuse(message: str) -> NodeValidationError:
    return NodeValidationError(f"invalid order_by: {message}")


def parse_order(order_by: object) -> tuple[OrderTerm, ...]:
    """``order_by`` (dotted field paths, a leading ``-`` for descending) as terms, or a refusal
    naming the input: a path is checked as a filter's field path is."""
    if isinstance(order_by, str) or not isinstance(order_by, tuple | list):
        raise _refuse(f"{order_by!r:.80} is not a tuple of field paths")
    if len(order_by) > MAX_ORDER_FIELDS:
        raise _refuse(f"{len(order_by)} fields; at most {MAX_ORDER_FIELDS}")
    terms: list[OrderTerm] = []
    for item in order_by:
        if not isinstance(item, str):
            raise _refuse(f"{item!r:.80} is not a field path")
        descending = item.startswith("-")
        try:
            segments = _parse_path(item[1:] if descending else item)
        except NodeValidationError as error:
            raise _refuse(f"{item!r:.80}: {str(error).removeprefix('invalid filter: ')}") from None
        if any(segments == seen for seen, _ in terms):
            raise _refuse(f"{item!r:.80} names a field already ordered by")
        terms.append((segments, descending))
    return tuple(terms)


def check_limit(limit: object) -> int:
    """``limit`` if it is an integer from 1 to :data:`MAX_WINDOW_LIMIT`, else a refusal."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise NodeValidationError(f"invalid limit: {limit!r:.80} is not an integer")
    if not 1 <= limit <= MAX_WINDOW_LIMIT:
        raise NodeValidationError(f"invalid limit: {limit}; from 1 to {MAX_WINDOW_LIMIT}")
    return limit


def _exact(value: int | float) -> Decimal:
    # A float is the number its JSON text names (what PostgreSQL's numeric holds).
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def term_value(content: object, path: tuple[str, ...]) -> tuple[int, Decimal | str | bool | None]:
    """The rank of the value at ``path`` in ``content``, and the value it is ordered by within
    its rank (``None`` for the ranks whose members are all equal)."""
    found = lookup(content, path)
    kind = _kind_of(found)
    rank = RANKS[kind]
    if kind == "number":
        return rank, _exact(found)  # type: ignore[arg-type]
    if kind in ("string", "boolean"):
        return rank, found  # type: ignore[return-value]
    return rank, None


def _descending_text(text: str) -> tuple[int, ...]:
    # Negated code points, then a mark above them all: a string sorts before its prefixes.
    return (*(-ord(char) for char in text), 1)


@functools.lru_cache(maxsize=256)
def _terms(order_by: tuple[str, ...]) -> tuple[OrderTerm, ...]:
    return parse_order(order_by)


def sort_key(order_by: tuple[str, ...], content: object, path: str) -> tuple[object, ...]:
    """A key whose tuple order is the window order of ``order_by`` (``order_by`` as a checked
    :class:`~rxmesh.model.NodeQuery` holds it): for each field its rank and its value (both
    negated, so to speak, when descending), then the path. Values of one rank are of one Python
    type (or ``0``), so two keys always compare."""
    key: list[object] = []
    for segments, descending in _terms(order_by):
        rank, value = term_value(content, segments)
        shown: object = value
        if value is None:
            shown = 0
        elif descending:
            if isinstance(value, Decimal):
                shown = -value
            elif isinstance(value, bool):
                shown = not value
            else:
                shown = _descending_text(value)
        key.append(-rank if descending else rank)
        key.append(shown)
    key.append(path)
    return tuple(key)
