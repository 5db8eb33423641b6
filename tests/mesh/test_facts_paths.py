"""Which announced paths drop a partition's kept facts (``FactsCache``): its root, its owner
record and its grants, nothing else. The check returns early for a node's own path (no segment
after the partition starts with ``_``); it must answer as the full rule does for every path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rxmesh.mesh._access import owner_path
from rxmesh.mesh._facts_cache import _is_fact_path
from rxmesh.model import partition_of


def _rule(path: str) -> str | None:
    """The rule in full: the partition when ``path`` is its root, owner record or a grant."""
    partition = partition_of(path)
    if path in (partition, owner_path(partition)) or path.startswith(f"{partition}/_access/"):
        return partition
    return None


segments = st.text(alphabet="ab_.-/", min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(st.lists(segments, min_size=1, max_size=4).map("/".join))
def test_the_early_return_agrees_with_the_rule(path: str) -> None:
    if not path or path.startswith("/"):
        return
    assert _is_fact_path(path) == _rule(path)


def test_the_fact_paths_and_their_neighbours() -> None:
    assert _is_fact_path("p") == "p"
    assert _is_fact_path("p/_owner") == "p"
    assert _is_fact_path("p/_access/alice") == "p"
    # Negative controls: paths that only look like facts, and plain nodes.
    for path in ("p/x", "p/_x", "p/x/_owner", "p/x/_access/alice", "p/_accessx/alice"):
        assert _is_fact_path(path) is None, path
