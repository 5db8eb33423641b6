"""The window order in Python (:meth:`NodeQuery.sort_key`) and in SQL (the PostgreSQL store's
order compiler) agree on every generated content, order and keyset boundary.

Each example orders a batch of generated nodes (the contents of the filter agreement test:
numbers and strings that look alike, floats that are integers, integers beyond a double's
precision, booleans, nulls, missing fields, arrays, objects, non-ASCII text) in one statement
(``unnest`` of jsonb and paths) and compares the SQL order with Python's ``sorted``; then it
reads "strictly after" one of the nodes and compares that with Python's tail.

The negative controls run the same checker on a compiled order made wrong on purpose (strings
compared in an ICU collation instead of ``"C"``, the ranks of strings and booleans swapped, the
keyset made inclusive) and require it to report a disagreement.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres._order import order_sql
from tests.model.test_filters_agree import contents, paths

asyncpg = pytest.importorskip("asyncpg")

SEGMENT = st.text("aAbBzZ09-._é", min_size=1, max_size=4).filter(
    lambda s: s not in (".", "..") and s.isascii()
)
orders = st.lists(
    st.tuples(paths, st.booleans()), min_size=0, max_size=3, unique_by=lambda t: t[0]
).map(lambda terms: tuple(("-" if down else "") + path for path, down in terms))
# "-1" is the field "1" descending (a leading "-" is the direction), so it and "1" are one field
orders = orders.filter(lambda order: len({item.removeprefix("-") for item in order}) == len(order))
batches = st.lists(st.tuples(SEGMENT, contents), min_size=1, max_size=25, unique_by=lambda t: t[0])

Rewrite = Callable[[str], str]


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[asyncio.AbstractEventLoop, object]]:
    from tests.conftest import PG_DSN, require_server

    require_server(PG_DSN, 5432, "PostgreSQL")
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(PG_DSN))
    try:
        yield loop, connection
    finally:
        loop.run_until_complete(connection.close())
        loop.close()


def _sql_paths(
    database: tuple[asyncio.AbstractEventLoop, object],
    query: NodeQuery,
    nodes: list[MeshNode],
    after: MeshNode | None,
    rewrite: Rewrite,
) -> list[str]:
    loop, connection = database
    order, keyset, params = order_sql(query, after, 3)
    where = "" if keyset is None else f" WHERE {rewrite(keyset)}"
    statement = (
        "SELECT path FROM (SELECT u.c::jsonb AS content, u.p AS path "
        f"FROM unnest($1::text[], $2::text[]) AS u(c, p)) t{where} ORDER BY {rewrite(order)}"
    )
    texts = [json.dumps(node.content, ensure_ascii=False) for node in nodes]
    rows = loop.run_until_complete(
        connection.fetch(statement, texts, [n.path for n in nodes], *params)  # type: ignore[attr-defined]
    )
    return [row[0] for row in rows]


def disagreement(
    database: tuple[asyncio.AbstractEventLoop, object],
    order_by: tuple[str, ...],
    batch: list[tuple[str, object]],
    rewrite: Rewrite = lambda sql: sql,
) -> str | None:
    """Where SQL's order (or its "after" read) differs from Python's, or ``None``."""
    query = NodeQuery(order_by=order_by, limit=10)
    nodes = [MeshNode(path=f"p/{segment}", content=content) for segment, content in batch]
    expected = [n.path for n in sorted(nodes, key=query.sort_key)]
    got = _sql_paths(database, query, nodes, None, rewrite)
    if got != expected:
        return f"order: SQL {got} != Python {expected}"
    by_path = {n.path: n for n in nodes}
    for index in sorted({0, len(expected) // 2, len(expected) - 1}):
        after = by_path[expected[index]]
        tail = _sql_paths(database, query, nodes, after, rewrite)
        if tail != expected[index + 1 :]:
            return f"after {after.path}: SQL {tail} != Python {expected[index + 1 :]}"
    return None


@given(order_by=orders, batch=batches)
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_python_and_postgres_order_alike(
    database: tuple[asyncio.AbstractEventLoop, object],
    order_by: tuple[str, ...],
    batch: list[tuple[str, object]],
) -> None:
    assert disagreement(database, order_by, batch) is None


MIXED = [
    ("a", {"k": "b"}),
    ("b", {"k": "B"}),
    ("c", {"k": "é"}),
    ("d", {"k": True}),
    ("e", {"k": "z"}),
    ("f", {"k": 1}),
    ("g", {"k": 1.0}),
    ("h", {}),
    ("i", {"k": None}),
    ("j", {"k": [1]}),
    ("k", {"k": {"x": 1}}),
    ("l", {"k": 10**25}),
    ("m", {"k": 1e25}),
    ("n", {"k": False}),
]


@pytest.mark.parametrize("order_by", [("k",), ("-k",), ()])
def test_chosen_mixed_batch_agrees(
    database: tuple[asyncio.AbstractEventLoop, object], order_by: tuple[str, ...]
) -> None:
    assert disagreement(database, order_by, MIXED) is None


def test_the_order_is_the_one_documented() -> None:
    query = NodeQuery(order_by=("k",), limit=20)
    nodes = [MeshNode(path=f"p/{segment}", content=content) for segment, content in MIXED]
    # absent and null (by path), numbers (1 and 1.0 tie, so do 10**25 and 1e25: by path),
    # strings by code point ("B" < "b" < "z" < "é"), booleans, arrays, objects
    assert [n.path[2:] for n in sorted(nodes, key=query.sort_key)] == list("hifglmbaecndjk")
    descending = NodeQuery(order_by=("-k",), limit=20)
    # the reverse, ties still by path
    assert [n.path[2:] for n in sorted(nodes, key=descending.sort_key)] == list("kjdnceablmfghi")


@pytest.mark.parametrize(
    ("what", "rewrite"),
    [
        (
            "strings in an ICU collation",
            lambda sql: sql.replace('COLLATE "C"', 'COLLATE "und-x-icu"'),
        ),
        (
            "strings ranked after booleans",
            lambda sql: sql.replace("'string' THEN 2", "'string' THEN 7"),
        ),
        ("an inclusive keyset", lambda sql: sql.replace(") > (", ") >= (")),
    ],
)
def test_negative_control_a_wrong_order_is_reported(
    database: tuple[asyncio.AbstractEventLoop, object], what: str, rewrite: Rewrite
) -> None:
    assert disagreement(database, ("k",), MIXED, rewrite) is not None, what
