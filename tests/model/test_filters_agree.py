"""The Python evaluator and PostgreSQL agree on every generated content and filter.

Each example compiles one generated filter with the PostgreSQL store's compiler and evaluates it
on a batch of generated contents in one statement (``unnest`` of jsonb); the answers must equal
:meth:`rxmesh.model.Filter.matches` on the same contents. The contents mix numbers and strings
that look alike, floats that are integers, integers beyond a double's precision, booleans, nulls,
missing fields, nested objects, arrays (indexed by path segments, negative ones included) and
non-ASCII keys and text.

String order is the one place where the database's collation could differ from Python's: the
compiler says ``COLLATE "C"``. On a database whose default collation is ``C.UTF-8`` that clause
changes nothing; on one created with ``LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`` this module passes,
and fails (two cases) with the clause removed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxmesh.model import Filter, and_, field, not_, or_
from rxmesh.providers.postgres._filters import to_sql

asyncpg = pytest.importorskip("asyncpg")

KEYS = ["a", "b", "ñ", "日本", "0", "1", "-1", "+0", "01"]
TEXTS = ["", "a", "ab", "B", "é", "日", "10", "1", "true", "null", "a\u00e9", "z\U0001f600"]
NUMBERS = [0, 1, -1, 2, 10, 1.0, 0.5, -0.0, 0.1, 1e25, 10**25, 10**25 + 1, 2.5, 1e-7]

scalars = st.one_of(
    st.sampled_from(TEXTS),
    st.sampled_from(NUMBERS),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4),
)
content_values = st.recursive(
    st.one_of(st.none(), scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
contents = st.one_of(st.dictionaries(st.sampled_from(KEYS), content_values, max_size=5), scalars)
paths = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(".".join)
filter_values = st.one_of(st.sampled_from(TEXTS), st.sampled_from(NUMBERS), st.booleans())
ordered_values = st.one_of(st.sampled_from(TEXTS), st.sampled_from(NUMBERS))


def _atoms() -> st.SearchStrategy[Filter]:
    return st.one_of(
        st.builds(lambda p, v: field(p).eq(v), paths, filter_values),
        st.builds(lambda p, v: field(p).ne(v), paths, filter_values),
        st.builds(lambda p, v: field(p).lt(v), paths, ordered_values),
        st.builds(lambda p, v: field(p).le(v), paths, ordered_values),
        st.builds(lambda p, v: field(p).gt(v), paths, ordered_values),
        st.builds(lambda p, v: field(p).ge(v), paths, ordered_values),
        st.builds(
            lambda p, vs: field(p).in_(vs), paths, st.lists(filter_values, min_size=1, max_size=4)
        ),
        st.builds(lambda p: field(p).is_null(), paths),
        st.builds(lambda p, v: field(p).contains(v), paths, filter_values),
        st.builds(lambda p, v: field(p).startswith(v), paths, st.sampled_from(TEXTS)),
    )


filters = st.recursive(
    _atoms(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda ts: and_(*ts)),
        st.lists(inner, min_size=1, max_size=3).map(lambda ts: or_(*ts)),
        inner.map(not_),
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[asyncio.AbstractEventLoop, object]]:
    from tests.conftest import PG_DSN, require_server

    require_server(PG_DSN, 5432, "PostgreSQL")
    pg_dsn = PG_DSN
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(pg_dsn))
    try:
        yield loop, connection
    finally:
        loop.run_until_complete(connection.close())
        loop.close()


def _postgres(
    database: tuple[asyncio.AbstractEventLoop, object], where: Filter, batch: list[object]
) -> list[bool]:
    loop, connection = database
    sql, params = to_sql(where, 2)
    statement = (
        f"SELECT {sql} FROM unnest($1::text[]) WITH ORDINALITY AS u(c, i), "
        "LATERAL (SELECT u.c::jsonb AS content) t ORDER BY u.i"
    )
    texts = [json.dumps(c, ensure_ascii=False) for c in batch]
    rows = loop.run_until_complete(connection.fetch(statement, texts, *params))  # type: ignore[attr-defined]
    return [row[0] for row in rows]


@given(where=filters, batch=st.lists(contents, min_size=1, max_size=25))
@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_python_and_postgres_agree(
    database: tuple[asyncio.AbstractEventLoop, object], where: Filter, batch: list[object]
) -> None:
    """For every content of the batch, SQL's answer equals the evaluator's."""
    expected = [where.matches(c) for c in batch]
    assert _postgres(database, where, batch) == expected, str(where)


@pytest.mark.parametrize(
    ("where", "content", "answer"),
    [
        (field("n").eq(1), {"n": 1.0}, True),
        (field("n").eq(1), {"n": "1"}, False),
        (field("n").eq(1), {"n": True}, False),
        (field("n").gt(10**25), {"n": 1e25}, False),
        (field("n").gt(1e25), {"n": 10**25 + 1}, True),
        (field("s").lt("é"), {"s": "z"}, True),
        (field("s").lt("Z"), {"s": "a"}, False),
        (field("x").is_null(), {}, False),
        (field("x").is_null(), {"x": None}, True),
        (not_(field("x").gt(1)), {"x": "2"}, True),
        (field("x").ne(1), {"x": "2"}, False),
        (field("a.-1").eq(3), {"a": [1, 2, 3]}, True),
        (field("a.+0").eq(1), {"a": [1, 2, 3]}, True),
        (field("a.01").eq(2), {"a": [1, 2, 3]}, True),
        (field("t").contains(1), {"t": [[1], 1.0]}, True),
        (field("t").contains(1), {"t": [[1]]}, False),
    ],
)
def test_chosen_cases_on_both_evaluators(
    database: tuple[asyncio.AbstractEventLoop, object], where: Filter, content: object, answer: bool
) -> None:
    """The edges the semantics table states, each with its answer (true and false ones)."""
    assert where.matches(content) is answer
    assert _postgres(database, where, [content]) == [answer]
