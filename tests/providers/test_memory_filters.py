"""The embedded store's live query keeps a content filter true on every delta: the Initial holds
only matches, a node that starts matching enters (an upsert), one that stops matching or is deleted
leaves (a removal). A random sequence of commits checks that the view (the Initial with every
Delta applied) always equals the nodes that match."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex.subject import Subject

from rxmesh.model import FrameKind, MeshNode, NodeChange, NodeQuery, QueryFrame, field
from rxmesh.providers import InMemoryStore
from rxmesh.providers._memory_live import live_query
from tests.helpers import done

WHERE = field("status").eq("open") & field("total").gt(100)
QUERY = NodeQuery(partition="p", where=WHERE)


def order(path: str, status: object, total: object) -> MeshNode:
    return MeshNode(path=path, content={"status": status, "total": total})


def test_the_initial_holds_only_matches_and_nodes_enter_and_leave() -> None:
    store = InMemoryStore()
    for node in (order("p/a", "open", 150), order("p/b", "open", 50), order("p/c", "shut", 500)):
        done(store.write(node))
    frames: list[QueryFrame] = []
    subscription = store.query(QUERY).subscribe(frames.append)
    assert frames[0].kind is FrameKind.INITIAL
    assert [n.path for n in frames[0].nodes] == ["p/a"]

    done(store.update(order("p/b", "open", 101)))  # starts matching: enters
    assert [n.path for n in frames[-1].nodes] == ["p/b"] and frames[-1].removed == ()
    done(store.update(order("p/a", "open", "150")))  # a string is not a number: leaves
    assert frames[-1].nodes == () and frames[-1].removed == ("p/a",)
    count = len(frames)
    done(store.update(order("p/c", "shut", 600)))  # still not matching: no frame
    assert len(frames) == count
    done(store.delete("p/b"))
    assert frames[-1].removed == ("p/b",)
    subscription.dispose()


def test_negative_control_the_same_commits_without_where_keep_every_node() -> None:
    store = InMemoryStore()
    done(store.write(order("p/a", "open", 150)))
    done(store.write(order("p/b", "open", 50)))
    frames: list[QueryFrame] = []
    store.query(NodeQuery(partition="p")).subscribe(frames.append)
    assert [n.path for n in frames[0].nodes] == ["p/a", "p/b"]
    done(store.update(order("p/a", "open", "150")))
    assert [n.path for n in frames[-1].nodes] == ["p/a"] and frames[-1].removed == ()


PATHS = ["p/a", "p/b", "p/c", "q/a"]
contents = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["open", "shut", None, 1]),
        "total": st.sampled_from([50, 100, 100.5, 101, "150", True, None]),
    },
)
commits = st.lists(
    st.lists(
        st.one_of(
            st.tuples(st.just("upsert"), st.sampled_from(PATHS), contents),
            st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
        ),
        min_size=1,
        max_size=3,
    ),
    max_size=25,
)


@given(initial=st.dictionaries(st.sampled_from(PATHS), contents), batches=commits)
@settings(max_examples=200, deadline=None)
def test_the_view_always_equals_the_matching_nodes(
    initial: dict[str, dict[str, object]], batches: list[list[tuple[str, str, object]]]
) -> None:
    state = {path: MeshNode(path=path, content=content) for path, content in initial.items()}
    subject: Subject[tuple[int, tuple[NodeChange, ...]]] = Subject()
    view: dict[str, MeshNode] = {}
    numbered = 0

    def on_frame(frame: QueryFrame) -> None:
        if frame.kind is FrameKind.INITIAL:
            view.clear()
        for path in frame.removed:
            del view[path]  # a removal names a node the view holds
        view.update((n.path, n) for n in frame.nodes)

    live_query(
        QUERY,
        commits=subject,
        snapshot=lambda q: (0, [n for n in state.values() if q.matches(n)]),
        resume=lambda q, t: None,
        token=str,
        opened=lambda _: None,
        provider="memory",
    ).subscribe(on_frame)
    for batch in batches:
        changes: list[NodeChange] = []
        for op, path, content in batch:
            if op == "upsert":
                state[path] = MeshNode(path=path, content=content)  # type: ignore[arg-type]
                changes.append(NodeChange(source="m", op="upsert", path=path, node=state[path]))
            else:
                state.pop(path, None)
                changes.append(NodeChange(source="m", op="delete", path=path))
        numbered += len(changes)
        subject.on_next((numbered, tuple(changes)))
        assert view == {p: n for p, n in state.items() if QUERY.matches(n)}
