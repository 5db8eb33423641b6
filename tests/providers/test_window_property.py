"""After any sequence of creates, updates, deletes and moves, an ordered window's view equals the
store's fresh first page (``page(query, None, limit)``), on the embedded store and on real
PostgreSQL: the members, their order and their rows.

Each example opens a window on a partition of its own, applies generated changes through the
store's verbs, then waits (bounded) until the folded view equals the truth read afterwards. Its
negative control is in tests/providers/test_window.py (a window whose refills read nothing stays
short, and the same comparison reports it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rxmesh.model import MeshNode, NodeQuery, field
from rxmesh.providers import InMemoryStore, Store
from tests.helpers import until
from tests.providers.test_window import View

NAMES = ["a", "b", "c", "d", "e", "f"]
VALUES = st.one_of(
    st.integers(-3, 3), st.sampled_from(["x", "X", "é", "1"]), st.booleans(), st.none()
)
CONTENTS = st.fixed_dictionaries({"s": VALUES, "k": st.booleans()}) | st.fixed_dictionaries({})
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(NAMES), CONTENTS),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.none()),
        st.tuples(st.just("move"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    ),
    max_size=12,
)
QUERIES = st.builds(
    lambda order_by, limit, filtered: (order_by, limit, filtered),
    st.sampled_from([("s",), ("-s",), ("s", "-k"), ("-k", "s"), ()]),
    st.integers(1, 4),
    st.booleans(),
)


async def _apply(store: Store, partition: str, ops: list[tuple[str, str, object]]) -> None:
    for op, name, arg in ops:
        path = f"{partition}/{name}"
        existing = await store.read(path)
        if op == "put":
            node = MeshNode(path=path, content=arg)
            if existing is None:
                await store.write(node)
            else:
                await store.update(node)
        elif op == "delete":
            await store.delete(path)
        elif existing is not None and await store.read(f"{partition}/{arg}") is None:
            await store.move(path, f"{partition}/{arg}")


def _rows(nodes: list[MeshNode]) -> list[tuple[str, int, object]]:
    return [(n.path, n.version, n.content) for n in nodes]


async def _one_example(
    store: Store,
    seed: list[tuple[str, str, object]],
    ops: list[tuple[str, str, object]],
    shape: tuple[tuple[str, ...], int, bool],
) -> None:
    partition = f"w{uuid.uuid4().hex[:12]}"
    order_by, limit, filtered = shape
    query = NodeQuery(
        partition=partition,
        order_by=order_by,
        limit=limit,
        where=field("k").eq(True) if filtered else None,
    )
    await _apply(store, partition, seed)
    view = View(store.query(query))
    try:
        await until(lambda: bool(view.frames or view.errors), within=5.0)
        await _apply(store, partition, ops)
        truth = await store.page(query, None, limit)

        def converged() -> bool:
            assert not view.errors, view.errors
            ordered = sorted(view.members.values(), key=query.sort_key)
            return _rows(ordered) == _rows(truth)

        try:
            await until(converged, within=5.0)
        except TimeoutError:
            ordered = sorted(view.members.values(), key=query.sort_key)
            raise AssertionError(f"view {_rows(ordered)} != truth {_rows(truth)}") from None
    finally:
        view.dispose()


def _property(run: Callable[..., None], max_examples: int) -> Callable[[], None]:
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: each step waits on a store
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(seed=OPS, ops=OPS, shape=QUERIES)
    def check(
        seed: list[tuple[str, str, object]],
        ops: list[tuple[str, str, object]],
        shape: tuple[tuple[str, ...], int, bool],
    ) -> None:
        run(seed, ops, shape)

    return check


@contextmanager
def _runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


@pytest.mark.timeout(300)
def test_the_window_equals_the_fresh_page_on_the_embedded_store() -> None:
    with _runner() as runner:
        store = InMemoryStore()
        _property(lambda *args: runner.run(_one_example(store, *args)), max_examples=150)()


@pytest.mark.timeout(300)
def test_the_window_equals_the_fresh_page_on_postgres(pg_dsn: str) -> None:
    from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

    prefix = unique_prefix()
    with _runner() as runner:
        try:

            async def open_store() -> tuple[Store, Callable[[], object]]:
                context = started(pg_dsn, prefix)
                store = await context.__aenter__()
                return store, lambda: context.__aexit__(None, None, None)

            store, close = runner.run(open_store())
            try:
                _property(lambda *args: runner.run(_one_example(store, *args)), max_examples=60)()
            finally:
                runner.run(close())  # type: ignore[arg-type]
        finally:
            runner.run(drop_schemas(pg_dsn, prefix))
