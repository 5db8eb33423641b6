"""The embedded store's resume tokens: every frame carries one, and a stream opened with one
answers first with a Delta of what changed since (removals included) or, when the store cannot
tell any more, an Initial marked ``reset``; never an error."""

from __future__ import annotations

import threading

import pytest

from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers import InMemoryStore
from tests.helpers import done

QUERY = NodeQuery(partition="p")


def note(path: str, **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Note", content=dict(content))


def frames(store: InMemoryStore, query: NodeQuery = QUERY, resume_from: str | None = None):
    seen: list[QueryFrame] = []
    subscription = store.query(query, resume_from).subscribe(seen.append)
    return seen, subscription


def token_after(store: InMemoryStore, query: NodeQuery = QUERY) -> str:
    """The token a reader holds after its latest frame."""
    seen, subscription = frames(store, query)
    subscription.dispose()
    token = seen[-1].resume_token
    assert token is not None
    return token


def view_of(seen: list[QueryFrame], base: dict[str, MeshNode] | None = None) -> dict[str, MeshNode]:
    view = dict(base or {})
    for frame in seen:
        if frame.kind is FrameKind.INITIAL:
            view = {}
        for path in frame.removed:
            view.pop(path, None)
        view.update((node.path, node) for node in frame.nodes)
    return view


def test_every_frame_carries_a_token_and_tokens_advance() -> None:
    store = InMemoryStore()
    done(store.write(note("p/a")))
    seen, subscription = frames(store)
    done(store.write(note("p/b")))
    done(store.update(note("p/a", x=1)))
    subscription.dispose()
    tokens = [frame.resume_token for frame in seen]
    assert all(token is not None for token in tokens)
    assert len(set(tokens)) == 3
    assert [int(str(token).rsplit(".", 1)[1]) for token in tokens] == [1, 2, 3]
    assert not any(frame.resumed or frame.reset for frame in seen)


def test_a_resume_answers_one_delta_of_what_changed_removals_included() -> None:
    store = InMemoryStore()
    for name in "abcd":
        done(store.write(note(f"p/{name}")))
    seen, subscription = frames(store)
    subscription.dispose()
    held = view_of(seen)
    token = seen[-1].resume_token
    done(store.update(note("p/a", x=1)))  # changed
    done(store.delete("p/b"))  # deleted
    done(store.move("p/c", "p/e"))  # moved away, and a new path
    done(store.write(note("q/z")))  # another partition: not this view's
    resumed, subscription = frames(store, resume_from=token)
    first = resumed[0]
    assert first.kind is FrameKind.DELTA and first.resumed and not first.reset
    assert sorted(node.path for node in first.nodes) == ["p/a", "p/e"]
    assert sorted(first.removed) == ["p/b", "p/c"]
    assert first.resume_token == token_after(store)
    # Applied to the view the token was taken from, it gives the view a fresh reader gets.
    assert view_of([first], held) == {n.path: n for n in store.nodes("p")}
    done(store.write(note("p/f")))  # then live deltas, as usual
    assert [node.path for node in resumed[1].nodes] == ["p/f"] and not resumed[1].resumed
    subscription.dispose()


def test_a_resume_with_nothing_changed_is_an_empty_resumed_delta() -> None:
    store = InMemoryStore()
    done(store.write(note("p/a")))
    token = token_after(store)
    done(store.write(note("q/a")))  # elsewhere: nothing changed in this view
    resumed, subscription = frames(store, resume_from=token)
    subscription.dispose()
    assert resumed[0].kind is FrameKind.DELTA and resumed[0].resumed
    assert resumed[0].nodes == () and resumed[0].removed == ()


def test_a_filtered_resume_reports_a_node_that_stopped_matching_as_removed() -> None:
    store = InMemoryStore()
    query = NodeQuery(partition="p", where=field("status").eq("open"))
    done(store.write(note("p/a", status="open")))
    done(store.write(note("p/b", status="shut")))
    token = token_after(store, query)
    done(store.update(note("p/a", status="shut")))  # leaves the view
    done(store.update(note("p/b", status="open")))  # enters it
    resumed, subscription = frames(store, query, token)
    subscription.dispose()
    assert [node.path for node in resumed[0].nodes] == ["p/b"]
    assert resumed[0].removed == ("p/a",)


def test_negative_control_a_deleted_then_recreated_path_is_a_node_not_a_removal() -> None:
    store = InMemoryStore()
    done(store.write(note("p/a")))
    token = token_after(store)
    done(store.delete("p/a"))
    done(store.write(note("p/a", again=True)))
    resumed, subscription = frames(store, resume_from=token)
    subscription.dispose()
    assert [node.content for node in resumed[0].nodes] == [{"again": True}]
    assert resumed[0].removed == ()


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        "m1",
        "m1.x.1",
        "m2.{instance}.1",
        "m1.{instance}.-1",
        "m1.{instance}.1.2",
        "m1.{instance}.٣",  # a digit, not an ASCII one
        "m1.{instance}.99",  # from the future
        "{other}",  # another store's
    ],
)
def test_a_token_this_store_cannot_resume_from_answers_a_reset_initial_never_an_error(
    token: str,
) -> None:
    store, other = InMemoryStore(), InMemoryStore()
    done(store.write(note("p/a")))
    done(other.write(note("p/a")))
    mine = token_after(store)
    instance = mine.split(".")[1]
    text = token.format(instance=instance, other=token_after(other))
    resumed, subscription = frames(store, resume_from=text)
    subscription.dispose()
    first = resumed[0]
    assert first.kind is FrameKind.INITIAL and first.reset and not first.resumed
    assert [node.path for node in first.nodes] == ["p/a"]
    assert first.resume_token == mine


def test_negative_control_the_same_store_own_token_resumes() -> None:
    store = InMemoryStore()
    done(store.write(note("p/a")))
    resumed, subscription = frames(store, resume_from=token_after(store))
    subscription.dispose()
    assert resumed[0].resumed and not resumed[0].reset


def test_a_token_past_the_tombstone_retention_resets_and_one_within_it_resumes() -> None:
    store = InMemoryStore(tombstone_retention=2)
    for name in "abcd":
        done(store.write(note(f"p/{name}")))
    old = token_after(store)
    done(store.delete("p/a"))
    within = token_after(store)
    done(store.delete("p/b"))
    done(store.delete("p/c"))  # three deletions kept two: the one of p/a is forgotten
    stats = store.statistics()
    assert stats.tombstones == 2 and stats.horizon == 5
    reset, subscription = frames(store, resume_from=old)
    subscription.dispose()
    assert reset[0].reset and [node.path for node in reset[0].nodes] == ["p/d"]
    resumed, subscription = frames(store, resume_from=within)  # the horizon itself: still known
    subscription.dispose()
    assert resumed[0].resumed and sorted(resumed[0].removed) == ["p/b", "p/c"]


def test_the_tombstone_retention_is_checked() -> None:
    with pytest.raises(ValueError, match="tombstone_retention"):
        InMemoryStore(tombstone_retention=-1)
    with pytest.raises(TypeError, match="tombstone_retention"):
        InMemoryStore(tombstone_retention=1.5)  # type: ignore[arg-type]


def test_commits_made_by_a_subscriber_come_in_order_to_every_other_subscriber() -> None:
    store = InMemoryStore()
    seen_b: list[QueryFrame] = []

    def writer(frame: QueryFrame) -> None:
        if frame.kind is FrameKind.DELTA and frame.nodes[0].content == {"x": 1}:
            done(store.update(note("p/a", x=2)))  # a commit made while this one is delivered

    first = store.query(QUERY).subscribe(writer)
    second = store.query(QUERY).subscribe(seen_b.append)
    done(store.write(note("p/a", x=1)))
    first.dispose()
    second.dispose()
    assert [frame.nodes[0].content for frame in seen_b[1:]] == [{"x": 1}, {"x": 2}]
    tokens = [int(str(frame.resume_token).rsplit(".", 1)[1]) for frame in seen_b]
    assert tokens == sorted(tokens) == [0, 1, 2]


def test_a_commit_published_late_by_another_thread_is_skipped_when_the_first_frame_has_it() -> None:
    store = InMemoryStore()
    published = threading.Event()
    release = threading.Event()
    real = store._commits.on_next  # the publication of the other thread's commit, held

    def held(commit: tuple[int, tuple[object, ...]]) -> None:
        published.set()
        release.wait(5)
        real(commit)  # type: ignore[arg-type]

    store._commits.on_next = held  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: done(store.write(note("p/a"))))
    thread.start()
    assert published.wait(5)
    store._commits.on_next = real  # type: ignore[method-assign]
    seen, subscription = frames(store)  # listens while the commit is not delivered yet
    done(store.delete("p/a"))
    release.set()
    thread.join(5)
    subscription.dispose()
    # The late delivery of the write must not bring back the deleted node.
    assert view_of(seen) == {}
    assert [frame.kind for frame in seen] == [FrameKind.INITIAL, FrameKind.DELTA]
