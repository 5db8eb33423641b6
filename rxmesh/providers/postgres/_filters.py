"""A content filter compiled to SQL over the ``content`` jsonb column, with the evaluator's meaning.

Pure: :func:`to_sql` returns a fragment and its parameters; every value and every field path
travels as a parameter (a path as ``text[]`` for ``#>``), never as text of the statement. Each
comparison first checks the JSON type with ``jsonb_typeof`` (a comparison across types is false)
and is wrapped in ``COALESCE(..., false)`` so a missing field is false rather than SQL ``NULL``:
the fragment is two-valued, and ``NOT`` means what :meth:`rxmesh.model.Filter.matches` means.
Strings compare with ``COLLATE "C"`` (code-point order, as Python compares them); numbers compare
as jsonb numbers (exact numeric, as the evaluator's decimals).
"""

from __future__ import annotations

import json

from rxmesh.model import Filter

__all__ = ["to_sql"]

_SQL_OPS = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class _Params:
    def __init__(self, first: int) -> None:
        self.first = first
        self.values: list[object] = []
        self.paths: dict[tuple[str, ...], str] = {}

    def add(self, value: object) -> str:
        self.values.append(value)
        return f"${self.first + len(self.values) - 1}"

    def path(self, path: tuple[str, ...]) -> str:
        if path not in self.paths:
            self.paths[path] = self.add(list(path))
        return self.paths[path]


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _atom(term: Filter, params: _Params) -> str:
    p = params.path(term.path)
    at = f"(content #> {p}::text[])"
    text = f"(content #>> {p}::text[])"
    op = term.op
    if op == "is_null":
        return f"COALESCE(jsonb_typeof({at}) = 'null', false)"
    if op == "contains":
        kind, value = term.values[0]
        arr = params.add(_json_text([value]))
        return f"COALESCE(jsonb_typeof({at}) = 'array' AND {at} @> {arr}::text::jsonb, false)"
    if op == "startswith":
        prefix = params.add(term.values[0][1])
        test = f"starts_with({text}, {prefix}::text)"
        return f"COALESCE(jsonb_typeof({at}) = 'string' AND {test}, false)"
    if op == "in":
        arms: list[str] = []
        for kind in ("boolean", "number", "string"):
            group = [v for k, v in term.values if k == kind]
            if not group:
                continue
            if kind == "number":
                ref = params.add([_json_text(v) for v in group])
                arms.append(
                    f"(jsonb_typeof({at}) = 'number' AND {at} = ANY({ref}::text[]::jsonb[]))"
                )
            else:
                ref = params.add([_json_text(v) if kind == "boolean" else v for v in group])
                arms.append(
                    f"(jsonb_typeof({at}) = '{kind}' AND {text} COLLATE \"C\" = ANY({ref}::text[]))"
                )
        return f"COALESCE({' OR '.join(arms)}, false)"
    kind, value = term.values[0]
    sql_op = _SQL_OPS[op]
    if kind == "number":
        ref = params.add(_json_text(value))
        return (
            f"COALESCE(jsonb_typeof({at}) = 'number' AND {at} {sql_op} {ref}::text::jsonb, false)"
        )
    ref = params.add(_json_text(value) if kind == "boolean" else value)
    test = f'{text} COLLATE "C" {sql_op} {ref}::text'
    return f"COALESCE(jsonb_typeof({at}) = '{kind}' AND {test}, false)"


def _compile(term: Filter, params: _Params) -> str:
    if term.op == "not":
        return f"(NOT {_compile(term.terms[0], params)})"
    if term.op in ("and", "or"):
        joiner = f" {term.op.upper()} "
        return "(" + joiner.join(_compile(t, params) for t in term.terms) + ")"
    return _atom(term, params)


def _integer(segment: str) -> bool:
    """Whether ``segment`` parses as an integer (Python's ``int`` accepts every spelling
    PostgreSQL's array index does: signs, leading zeros, surrounding blanks)."""
    try:
        int(segment)
    except ValueError:
        return False
    return True


def _containment(term: Filter) -> str | None:
    """The jsonb document ``content`` contains whenever ``term`` (an equality) holds, as text;
    ``None`` for any other term, or a path whose segment ``#>`` could read as an array index
    (containment would look for an object key there)."""
    if term.op != "eq" or any(map(_integer, term.path)):
        return None
    document: object = term.values[0][1]
    for segment in reversed(term.path):
        document = {segment: document}
    return _json_text(document)


def to_sql(where: Filter, first_param_index: int) -> tuple[str, list[object]]:
    """The SQL boolean expression over ``content`` equal to ``where.matches(content)``, and its
    parameters (numbered from ``$first_param_index``; a field path used twice is one parameter).

    Each equality the whole filter requires (the filter itself, or a term of its top-level
    ``and``) is also written as ``content @> $n::jsonb``: implied by the exact test, so the meaning
    is unchanged, but a clause a GIN index on ``content`` (``jsonb_path_ops``) can answer, which a
    ``COALESCE`` around a typed comparison never is.
    """
    if first_param_index < 1:
        raise ValueError(f"first_param_index {first_param_index} is below 1")
    params = _Params(first_param_index)
    exact = _compile(where, params)
    required = where.terms if where.op == "and" else (where,)
    hints = [
        f"content @> {params.add(document)}::text::jsonb"
        for document in map(_containment, required)
        if document is not None
    ]
    return " AND ".join([*hints, exact]) if hints else exact, params.values
