"""Floats in content come back as floats from PostgreSQL (SPEC: a node reads back as written).

``jsonb`` keeps a number as ``numeric`` and prints it without an exponent, so a float that JSON
writes with a positive exponent (``1e+300``) used to come back as a 301-digit ``int``; the
embedded store kept the float. Found by tests/reliability/test_hostile.py (a random content
with ``-1.130113731907622e+210``). The round-trip test below fails against 676b8b7.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres import PostgresStore
from rxmesh.providers.postgres._rows import _for_jsonb
from tests.providers.conftest import collect

pytestmark = pytest.mark.postgres

WAIT = 10.0
CONTENT: dict[str, Any] = {
    "huge": 1e300,
    "negative": -1.130113731907622e210,
    "just_over": 1e16,
    "mantissa": 1.5e16,
    "list": [1e20, 2.5, 7, -3e100],
    "tiny": 1e-300,
    "plain": 1.5,
    "integral": 12345.0,
    "int": 10**30,
    "text": 'a "1e+300" in a string, 2e+5 \\" too',
}


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON kind all the way down (1e16 is not 10000000000000000)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_the_check_tells_a_float_from_an_int() -> None:
    """Negative control of :func:`_same`: what the old round trip returned differs."""
    assert not _same({"x": 1e16}, {"x": 10**16})
    assert _same(CONTENT, json.loads(json.dumps(CONTENT)))


async def test_a_node_reads_back_with_its_floats(pg_dsn: str, prefix: str) -> None:
    async with PostgresStore(pg_dsn, schema_prefix=prefix) as store:
        await store.write(MeshNode(path="p/one", content=CONTENT, version=1))
        await collect(
            store.write_many([MeshNode(path=f"p/bulk{i}", content=CONTENT) for i in range(3)]),
            timeout=WAIT,
        )
        updated = await store.update(MeshNode(path="p/one", content=dict(CONTENT, v=2), version=2))
        assert updated is not None
        read = await store.read("p/one")
        assert read is not None and _same(read.content, dict(CONTENT, v=2))
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        for node in frame.nodes:
            expected = dict(CONTENT, v=2) if node.path == "p/one" else CONTENT
            assert _same(node.content, expected), node.path


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_rewrite_changes_no_value_and_no_kind(value: Any) -> None:
    """Whatever JSON text ``json.dumps`` writes, the rewritten text decodes to the same value of
    the same kinds (only the spelling of positive-exponent floats changes)."""
    text = json.dumps(value)
    rewritten = _for_jsonb(text)
    assert _same(json.loads(rewritten), value)
    assert "e+" not in rewritten or '"' in rewritten  # what is left of "e+" is inside strings
