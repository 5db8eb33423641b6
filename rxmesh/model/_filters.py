"""Content filters: a small typed predicate over a node's JSON content, and its Python evaluator.

Private: the names a user needs (:class:`Filter`, :func:`field`, :func:`and_`, :func:`or_`,
:func:`not_`) are public from :mod:`rxmesh.model`; docs/live-queries.md ("Content filters") states
the language and its semantics. A store that evaluates filters itself (PostgreSQL, in SQL) reads
the public fields of :class:`Filter` (``op``, ``path``, ``values``, ``terms``) and must agree with
:meth:`Filter.matches` on every content.

Every filter is checked and put in canonical form when it is built, so a hostile one is refused
before any store sees it and two equal filters compare and hash equal (they key one upstream).
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from dataclasses import dataclass
from dataclasses import field as dc_field
from decimal import Decimal
from typing import Literal

from rxmesh.exceptions import NodeValidationError
from rxmesh.model._rules import MAX_CONTENT_INT_DIGITS

__all__ = [
    "MAX_FIELD_PATH_LENGTH",
    "MAX_FIELD_PATH_SEGMENTS",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_IN_VALUES",
    "MAX_FILTER_TERMS",
    "MAX_FILTER_TEXT_LENGTH",
    "Filter",
    "FilterOp",
    "Kind",
    "and_",
    "field",
    "not_",
    "or_",
]

MAX_FILTER_DEPTH = 16
"""Deepest nesting of ``and_`` / ``or_`` / ``not_`` accepted (after flattening)."""
MAX_FILTER_TERMS = 256
"""Most nodes (comparisons and connectives) in one filter."""
MAX_FILTER_IN_VALUES = 100
"""Most values of one ``in_``."""
MAX_FILTER_TEXT_LENGTH = 4096
"""Longest string value in a filter, in characters."""
MAX_FIELD_PATH_SEGMENTS = 16
"""Most segments of a field path."""
MAX_FIELD_PATH_LENGTH = 256
"""Longest field path, in characters of its dotted form."""

FilterOp = Literal[
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "in",
    "is_null",
    "contains",
    "startswith",
    "and",
    "or",
    "not",
]
"""The operation of one :class:`Filter` node."""
Kind = Literal["string", "number", "boolean"]
"""The JSON type of a filter value; a comparison only ever matches content of the same type."""
Scalar = str | int | float | bool
TaggedValue = tuple[Kind, Scalar]

_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_ORDERED = frozenset({"lt", "le", "gt", "ge"})
_CONNECTIVES = frozenset({"and", "or", "not"})
# Characters a field-path segment may not hold: the separator, quotes and the backslash (they
# invite quoting mistakes downstream), and anything that is not printable text.
_FORBIDDEN_IN_SEGMENT = frozenset(".'\"`\\")
# A segment PostgreSQL's path operator reads as an array index (it parses it as a C integer);
# the evaluator reads it the same way so both stores agree on arrays.
_INDEX = re.compile(r"[+-]?[0-9]+")
_INT32 = 2**31
_INT_LIMIT = 10**MAX_CONTENT_INT_DIGITS


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _refuse(message: str) -> NodeValidationError:
    return NodeValidationError(f"invalid filter: {message}")


def _segment_problem(segment: str) -> str | None:
    if not segment:
        return "has an empty segment"
    for char in segment:
        if char in _FORBIDDEN_IN_SEGMENT:
            return f"holds {char!r}, which a field path may not"
        category = unicodedata.category(char)
        if category in {"Cc", "Cs", "Zl", "Zp", "Zs", "Cf"}:
            return f"holds {char!r} (a control, space, format or lone surrogate character)"
    return None


def _parse_path(path: object) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise _refuse(f"field path {_shown(path)} is not a string")
    if len(path) > MAX_FIELD_PATH_LENGTH:
        raise _refuse(
            f"field path {_shown(path)} is {len(path)} characters long; "
            f"at most {MAX_FIELD_PATH_LENGTH}"
        )
    return _check_segments(tuple(path.split(".")), shown=path)


def _check_segments(segments: tuple[str, ...], *, shown: str) -> tuple[str, ...]:
    if len(segments) > MAX_FIELD_PATH_SEGMENTS:
        raise _refuse(
            f"field path {_shown(shown)} has {len(segments)} segments; "
            f"at most {MAX_FIELD_PATH_SEGMENTS}"
        )
    for segment in segments:
        if not isinstance(segment, str):
            raise _refuse(f"field path {_shown(shown)}: {_shown(segment)} is not a string")
    if sum(len(s) for s in segments) + len(segments) - 1 > MAX_FIELD_PATH_LENGTH:
        raise _refuse(f"field path {_shown(shown)} is longer than {MAX_FIELD_PATH_LENGTH}")
    for segment in segments:
        problem = _segment_problem(segment)
        if problem is not None:
            raise _refuse(f"field path {_shown(shown)} {problem}")
    return segments


def _tag(value: object, *, where: str) -> TaggedValue:
    """The value in canonical form with its JSON type, or a refusal naming it."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int):
        if not -_INT_LIMIT < value < _INT_LIMIT:
            raise _refuse(
                f"{where}: an integer of more than {MAX_CONTENT_INT_DIGITS} digits is not allowed"
            )
        return ("number", value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refuse(f"{where}: {value!r} is not a JSON number")
        # A float means the number its JSON text names (what a store keeps); an integral one is
        # that integer, so 1 and 1.0 are one filter.
        exact = Decimal(repr(value))
        if exact == exact.to_integral_value():
            return ("number", int(exact))
        return ("number", value)
    if isinstance(value, str):
        if len(value) > MAX_FILTER_TEXT_LENGTH:
            raise _refuse(
                f"{where}: a string of {len(value)} characters; at most {MAX_FILTER_TEXT_LENGTH}"
            )
        if "\x00" in value:
            raise _refuse(f"{where}: {_shown(value)} holds NUL, which no store keeps")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse(f"{where}: {_shown(value)} holds a lone surrogate") from None
        return ("string", value)
    if value is None:
        raise _refuse(f"{where}: null is not a comparison value; use field(...).is_null()")
    raise _refuse(f"{where}: {_shown(value)} is not a JSON string, number or boolean")


def _kind_of(value: object) -> str:
    """The JSON type of a content value (``missing`` when the path leads nowhere)."""
    if value is _MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _exact(value: Scalar) -> Decimal:
    # A float is the number its JSON text names: what PostgreSQL's numeric holds.
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _same(kind: str, left: object, right: Scalar) -> bool:
    if kind == "number":
        return _exact(left) == _exact(right)  # type: ignore[arg-type]
    return left == right


def _order(kind: str, left: object, right: Scalar) -> int:
    if kind == "number":
        a, b = _exact(left), _exact(right)  # type: ignore[arg-type]
    else:
        a, b = left, right  # type: ignore[assignment]
    return int(a > b) - int(a < b)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def lookup(content: object, path: tuple[str, ...]) -> object:
    """The value at ``path`` in ``content``, or the missing marker; arrays are indexed the way
    PostgreSQL's ``#>`` indexes them (a C integer, negative counting from the end)."""
    node = content
    for segment in path:
        if isinstance(node, dict):
            if segment not in node:
                return _MISSING
            node = node[segment]
        elif isinstance(node, list):
            if _INDEX.fullmatch(segment) is None:
                return _MISSING
            index = int(segment)
            if not -_INT32 < index < _INT32:
                return _MISSING
            if index < 0:
                index += len(node)
            if not 0 <= index < len(node):
                return _MISSING
            node = node[index]
        else:
            return _MISSING
    return node


@dataclass(frozen=True, slots=True)
class Filter:
    """A content filter: one node of a predicate tree over a node's JSON content.

    Build filters with :func:`field` (``field("order.total").gt(100)``) and :func:`and_`,
    :func:`or_`, :func:`not_` (or ``&``, ``|``, ``~``); they are checked and put in canonical form
    as they are built, so equal filters compare and hash equal. The fields are public for the
    stores that compile a filter:

    Attributes:
        op: the operation.
        path: the field path's segments (comparisons only).
        values: the operand(s), each with its JSON type: one for a comparison, ``contains`` and
            ``startswith``; up to :data:`MAX_FILTER_IN_VALUES` for ``in``, none for ``is_null``.
        terms: the operands of ``and`` / ``or`` (two or more) and ``not`` (one).
    """

    op: FilterOp
    path: tuple[str, ...] = ()
    values: tuple[TaggedValue, ...] = ()
    terms: tuple[Filter, ...] = ()
    size: int = dc_field(default=1, init=False, compare=False, repr=False)
    depth: int = dc_field(default=1, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (
            isinstance(self.path, tuple)
            and isinstance(self.terms, tuple)
            and isinstance(self.values, tuple)
            and all(isinstance(v, tuple) and len(v) == 2 for v in self.values)
        ):
            raise _refuse(
                f"{self.op}: path, values and terms are tuples (values of (kind, value) pairs)"
            )
        if self.op not in _COMPARISONS | _CONNECTIVES | {"in", "is_null", "contains", "startswith"}:
            raise _refuse(f"unknown operation {_shown(self.op)}")
        if self.op in _CONNECTIVES:
            wanted = (1, 1) if self.op == "not" else (2, MAX_FILTER_TERMS)
            if not wanted[0] <= len(self.terms) <= wanted[1] or self.path or self.values:
                raise _refuse(f"{self.op} takes {wanted[0]} to {wanted[1]} filters")
            for term in self.terms:
                if not isinstance(term, Filter):
                    raise _refuse(f"{self.op}: {_shown(term)} is not a Filter")
            size = 1 + sum(t.size for t in self.terms)
            depth = 1 + max(t.depth for t in self.terms)
            if size > MAX_FILTER_TERMS:
                raise _refuse(f"{size} terms; at most {MAX_FILTER_TERMS}")
            if depth > MAX_FILTER_DEPTH:
                raise _refuse(f"nested {depth} deep; at most {MAX_FILTER_DEPTH}")
            object.__setattr__(self, "size", size)
            object.__setattr__(self, "depth", depth)
            return
        if self.terms or not self.path:
            raise _refuse(f"{self.op} takes a field path and no filters")
        _check_segments(self.path, shown=repr(self.path))
        counts = {"is_null": (0, 0), "in": (1, MAX_FILTER_IN_VALUES)}.get(self.op, (1, 1))
        if not counts[0] <= len(self.values) <= counts[1]:
            raise _refuse(
                f"{self.op} on {'.'.join(self.path)!r} takes {counts[0]} to {counts[1]} values, "
                f"not {len(self.values)}"
            )
        for kind, value in self.values:
            if _tag(value, where=self.op) != (kind, value):
                raise _refuse(f"{self.op}: {_shown(value)} is not tagged {kind!r} canonically")
            if self.op in _ORDERED and kind == "boolean":
                raise _refuse(f"{self.op}: booleans are not ordered")
            if self.op == "startswith" and kind != "string":
                raise _refuse(f"startswith: {_shown(value)} is not a string")

    def matches(self, content: object) -> bool:
        """Whether ``content`` (a node's JSON content) satisfies this filter."""
        op = self.op
        if op == "and":
            return all(term.matches(content) for term in self.terms)
        if op == "or":
            return any(term.matches(content) for term in self.terms)
        if op == "not":
            return not self.terms[0].matches(content)
        found = lookup(content, self.path)
        if op == "is_null":
            return found is None
        kind = _kind_of(found)
        if op == "contains":
            want_kind, want = self.values[0]
            return kind == "array" and any(
                _kind_of(item) == want_kind and _same(want_kind, item, want)
                for item in found  # type: ignore[attr-defined]
            )
        if op == "in":
            return any(k == kind and _same(k, found, v) for k, v in self.values)
        want_kind, want = self.values[0]
        if kind != want_kind:
            return False
        if op == "startswith":
            return isinstance(found, str) and isinstance(want, str) and found.startswith(want)
        if op == "eq":
            return _same(kind, found, want)
        if op == "ne":
            return not _same(kind, found, want)
        order = _order(kind, found, want)
        return {"lt": order < 0, "le": order <= 0, "gt": order > 0, "ge": order >= 0}[op]

    def __and__(self, other: Filter) -> Filter:
        return and_(self, other)

    def __or__(self, other: Filter) -> Filter:
        return or_(self, other)

    def __invert__(self) -> Filter:
        return not_(self)

    def __str__(self) -> str:
        if self.op in {"and", "or"}:
            return "(" + f" {self.op} ".join(str(t) for t in self.terms) + ")"
        if self.op == "not":
            return f"not {self.terms[0]}"
        name = ".".join(self.path)
        shown = [repr(v) for _, v in self.values]
        if self.op == "in":
            return f"{name} in [{', '.join(shown)}]"
        if self.op == "is_null":
            return f"{name} is null"
        return f"{name} {self.op} {shown[0]}"


def _sort_key(term: Filter) -> tuple[object, ...]:
    # A total order on canonical filters (values of mixed types ordered by their type first).
    return (
        term.op,
        term.path,
        tuple((k, repr(v)) for k, v in term.values),
        tuple(_sort_key(t) for t in term.terms),
    )


@dataclass(frozen=True, slots=True)
class field:
    """A field of the content, named by a dotted path (``"order.total"``); its methods build
    the comparisons. A segment of digits indexes an array (negative from its end)."""

    path: tuple[str, ...]

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "path", _parse_path(path))

    def _compare(self, op: FilterOp, value: object) -> Filter:
        return Filter(op, self.path, (_tag(value, where=f"{op} on {'.'.join(self.path)!r}"),))

    def eq(self, value: Scalar) -> Filter:
        """The field holds a value of the same JSON type equal to ``value``."""
        return self._compare("eq", value)

    def ne(self, value: Scalar) -> Filter:
        """The field holds a value of the same JSON type not equal to ``value``."""
        return self._compare("ne", value)

    def lt(self, value: str | int | float) -> Filter:
        """The field holds a number (a string) less than ``value``."""
        return self._compare("lt", value)

    def le(self, value: str | int | float) -> Filter:
        """The field holds a number (a string) at most ``value``."""
        return self._compare("le", value)

    def gt(self, value: str | int | float) -> Filter:
        """The field holds a number (a string) greater than ``value``."""
        return self._compare("gt", value)

    def ge(self, value: str | int | float) -> Filter:
        """The field holds a number (a string) at least ``value``."""
        return self._compare("ge", value)

    def in_(self, values: object) -> Filter:
        """The field equals one of ``values`` (at most :data:`MAX_FILTER_IN_VALUES`)."""
        name = ".".join(self.path)
        if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
            raise _refuse(f"in_ on {name!r}: {_shown(values)} is not a list of values")
        # Never more than one value past the limit is read: an endless iterable is refused too.
        items = list(itertools.islice(values, MAX_FILTER_IN_VALUES + 1))
        if len(items) > MAX_FILTER_IN_VALUES:
            raise _refuse(f"in_ on {name!r}: more than {MAX_FILTER_IN_VALUES} values")
        if not items:
            raise _refuse(f"in_ on {name!r}: no values")
        tagged: dict[tuple[str, object], TaggedValue] = {}
        for item in items:
            kind, value = _tag(item, where=f"in_ on {name!r}")
            key = (kind, _exact(value) if kind == "number" else value)
            tagged.setdefault(key, (kind, value))
        ordered = sorted(tagged.values(), key=lambda kv: (kv[0], repr(kv[1])))
        return Filter("in", self.path, tuple(ordered))

    def is_null(self) -> Filter:
        """The field is present and holds JSON ``null`` (a missing field does not match)."""
        return Filter("is_null", self.path)

    def contains(self, value: Scalar) -> Filter:
        """The field is an array with an element of the same JSON type equal to ``value``."""
        return self._compare("contains", value)

    def startswith(self, prefix: str) -> Filter:
        """The field is a string starting with ``prefix``."""
        if not isinstance(prefix, str):
            raise _refuse(
                f"startswith on {'.'.join(self.path)!r}: {_shown(prefix)} is not a string"
            )
        return self._compare("startswith", prefix)


def _connective(op: Literal["and", "or"], terms: tuple[object, ...]) -> Filter:
    if len(terms) > MAX_FILTER_TERMS:
        raise _refuse(f"{op}_ of {len(terms)} filters; at most {MAX_FILTER_TERMS} terms in all")
    flat: dict[Filter, None] = {}
    for term in terms:
        if not isinstance(term, Filter):
            raise _refuse(f"{op}_: {_shown(term)} is not a Filter")
        for part in term.terms if term.op == op else (term,):
            flat[part] = None
    if not flat:
        raise _refuse(f"{op}_ of no filters")
    if len(flat) == 1:
        return next(iter(flat))
    return Filter(op, terms=tuple(sorted(flat, key=_sort_key)))


def and_(*terms: Filter) -> Filter:
    """Every term holds. Nested ``and_`` are flattened, duplicates dropped, terms ordered."""
    return _connective("and", terms)


def or_(*terms: Filter) -> Filter:
    """Some term holds. Nested ``or_`` are flattened, duplicates dropped, terms ordered."""
    return _connective("or", terms)


def not_(term: Filter) -> Filter:
    """The term does not hold (``not_(not_(f))`` is ``f``). A missing field or one of another
    JSON type fails every comparison, so its negation holds."""
    if not isinstance(term, Filter):
        raise _refuse(f"not_: {_shown(term)} is not a Filter")
    if term.op == "not":
        return term.terms[0]
    return Filter("not", terms=(term,))
