"""An ordered window's order compiled to SQL over the ``content`` jsonb column and the path, with
:meth:`rxmesh.model.NodeQuery.sort_key`'s meaning.

Pure: :func:`order_sql` returns the ``ORDER BY`` list and the keyset condition "strictly after
this node", with their parameters; every field path and every value travels as a parameter,
never as text of the statement. Each field is three expressions that are never ``NULL``: its
rank (the JSON type: absent and ``null`` 0, number 1, string 2, boolean 3, array 4, object 5),
its number (``numeric``, exact; 0 unless a number) and its text (``COLLATE "C"``: UTF-8 byte
order is code-point order; the text of a string or of a boolean, ``'false' < 'true'``; empty
otherwise). Within a rank only one of them varies, so comparing the three as a row is comparing
the field. The path, compared ``COLLATE "C"`` too, breaks ties.

Because nothing is ``NULL``, "after" is one row comparison when every field ascends, which a
B-tree index on the same expressions answers as a range (docs/live-queries.md, "Ordered
windows", gives the index); with a descending field it is the lexicographic expansion, a filter on
the leading field's own row comparison, which the index answers as a range read in order.
"""

from __future__ import annotations

from decimal import Decimal

from rxmesh.model import MeshNode, NodeQuery, field

__all__ = ["OrderTerm", "index_columns", "order_sql", "order_terms"]

OrderTerm = tuple[tuple[str, ...], bool]
"""A field path's segments, and whether it descends."""

_RANK = (
    "CASE jsonb_typeof({v}) WHEN 'number' THEN 1 WHEN 'string' THEN 2 WHEN 'boolean' THEN 3"
    " WHEN 'array' THEN 4 WHEN 'object' THEN 5 ELSE 0 END"
)
_NUMBER = "CASE WHEN jsonb_typeof({v}) = 'number' THEN ({v})::numeric ELSE 0 END"
_TEXT = (
    "(CASE WHEN jsonb_typeof({v}) IN ('string', 'boolean') THEN content #>> {p}::text[]"
    " ELSE '' END) COLLATE \"C\""
)
_PATH = 'path COLLATE "C"'


def order_terms(query: NodeQuery) -> tuple[OrderTerm, ...]:
    """``query.order_by`` as segments and directions (the model checked every path)."""
    terms: list[OrderTerm] = []
    for item in query.order_by:
        descending = item.startswith("-")
        terms.append((field(item[1:] if descending else item).path, descending))
    return tuple(terms)


def _after_values(query: NodeQuery, node: MeshNode) -> list[tuple[int, str, str]]:
    """Each field's (rank, number, text) of ``node``, recovered from its sort key (the one
    definition of the order) so both sides see the same values."""
    key = query.sort_key(node)
    values: list[tuple[int, str, str]] = []
    for index, (_, descending) in enumerate(order_terms(query)):
        rank_seen, value = key[2 * index], key[2 * index + 1]
        assert isinstance(rank_seen, int)
        rank = -rank_seen if descending else rank_seen
        number, text = "0", ""
        if rank == 1:
            assert isinstance(value, Decimal)
            number = str(-value if descending else value)
        elif rank == 2:
            if descending:
                assert isinstance(value, tuple)
                text = "".join(chr(-code) for code in value[:-1])
            else:
                assert isinstance(value, str)
                text = value
        elif rank == 3:
            truth = (not value) if descending else value
            text = "true" if truth else "false"
        values.append((rank, number, text))
    return values


class _Params:
    def __init__(self, first: int) -> None:
        self.first = first
        self.values: list[object] = []

    def add(self, value: object) -> str:
        self.values.append(value)
        return f"${self.first + len(self.values) - 1}"


def order_sql(
    query: NodeQuery, after: MeshNode | None, first_param_index: int
) -> tuple[str, str | None, list[object]]:
    """The ``ORDER BY`` list of ``query``'s order, the condition "strictly after ``after``"
    (``None`` without ``after``), and their parameters numbered from ``$first_param_index``."""
    if first_param_index < 1:
        raise ValueError(f"first_param_index {first_param_index} is below 1")
    params = _Params(first_param_index)
    terms = order_terms(query)
    columns: list[tuple[str, str, str]] = []
    order: list[str] = []
    for segments, descending in terms:
        p = params.add(list(segments))
        v = f"(content #> {p}::text[])"
        triple = (_RANK.format(v=v), _NUMBER.format(v=v), _TEXT.format(v=v, p=p))
        columns.append(triple)
        order.extend(f"{c} DESC" if descending else c for c in triple)
    order.append(_PATH)
    if after is None:
        return ", ".join(order), None, params.values

    def row(items: list[str]) -> str:
        return "(" + ", ".join(items) + ")"

    keys: list[list[str]] = []
    for rank, number, text in _after_values(query, after):
        keys.append(
            [
                f"{params.add(rank)}::int",
                f"{params.add(number)}::text::numeric",
                f"{params.add(text)}::text",
            ]
        )
    path = params.add(after.path)
    if not any(descending for _, descending in terms):
        left = [c for triple in columns for c in triple] + [_PATH]
        right = [k for key in keys for k in key] + [f"{path}::text"]
        return ", ".join(order), f"{row(left)} > {row(right)}", params.values
    arms: list[str] = []
    equal: list[str] = []
    for (_, descending), triple, key in zip(terms, columns, keys, strict=True):
        sign = "<" if descending else ">"
        arms.append(" AND ".join([*equal, f"{row(list(triple))} {sign} {row(key)}"]))
        equal.append(f"{row(list(triple))} = {row(key)}")
    arms.append(" AND ".join([*equal, f"{_PATH} > {path}::text"]))
    lead = f"{row(list(columns[0]))} {'<=' if terms[0][1] else '>='} {row(keys[0])}"
    # ``IS TRUE`` keeps the expansion out of the index's reach: the planner's estimate of a
    # row comparison looks at its first column only (the rank, nearly constant), so it would
    # take each arm for a handful of rows and OR bitmap scans of them, then sort; as a filter
    # on the leading field's range the index is read in order and the LIMIT stops it.
    condition = f"{lead} AND (" + " OR ".join(f"({arm})" for arm in arms) + ") IS TRUE"
    return ", ".join(order), condition, params.values


def index_columns(query: NodeQuery) -> str:
    """The column list of a B-tree index that serves ``query``'s order (its ``ORDER BY`` and
    "after" condition): the same expressions, each field path written as an array literal (a
    field path holds no quote: the model refuses one), so the planner matches them with the
    statement's parameters once it plans for their values."""
    columns: list[str] = []
    for segments, descending in order_terms(query):
        p = "ARRAY[" + ", ".join(f"'{segment}'" for segment in segments) + "]"
        v = f"(content #> {p})"
        for expression in (_RANK.format(v=v), _NUMBER.format(v=v), _TEXT.format(v=v, p=p)):
            expression = expression.replace(f"{p}::text[]", p)
            columns.append(f"({expression}) DESC" if descending else f"({expression})")
    columns.append(_PATH)
    return ", ".join(columns)
