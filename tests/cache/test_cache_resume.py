"""SyncedQueryCache.get(query, resume_from): a shared chain standing exactly at the token answers
with an empty resumed Delta, then its frames; any other token gets a private upstream opened with
``open_resumed`` (neither shared nor cached), or, without one, the snapshot marked ``reset``."""

from __future__ import annotations

from reactivex import Observable
from reactivex.testing import TestScheduler

from rxmesh.cache import SyncedQueryCache, fold_query_frames
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers import InMemoryStore
from tests.helpers import done

QUERY = NodeQuery(partition="p")


def world(
    resumable: bool = True,
) -> tuple[InMemoryStore, SyncedQueryCache[NodeQuery, QueryFrame], list[str]]:
    store = InMemoryStore()
    opened: list[str] = []

    def open_resumed(query: NodeQuery, token: str) -> Observable[QueryFrame]:
        opened.append(token)
        return store.query(query, token)

    cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
        store.query,
        replay=fold_query_frames,
        scheduler=TestScheduler(),
        open_resumed=open_resumed if resumable else None,
    )
    return store, cache, opened


def test_a_chain_at_exactly_the_token_answers_an_empty_resumed_delta_then_its_frames() -> None:
    store, cache, opened = world()
    done(store.write(MeshNode(path="p/a")))
    held: list[QueryFrame] = []
    cache.get(QUERY).subscribe(held.append)
    token = held[-1].resume_token
    assert token is not None
    resumed: list[QueryFrame] = []
    cache.get(QUERY, token).subscribe(resumed.append)
    done(store.write(MeshNode(path="p/b")))
    assert [(f.kind, f.resumed, f.nodes) for f in resumed[:1]] == [(FrameKind.DELTA, True, ())]
    assert resumed[0].resume_token == token
    assert [n.path for n in resumed[1].nodes] == ["p/b"] and resumed[1] is held[-1]  # shared
    stats = cache.statistics()
    assert (stats.upstream_subscriptions, stats.resumed_on_chain, stats.resumed_upstreams) == (
        1,
        1,
        0,
    )
    assert opened == []


def test_a_token_the_chain_moved_past_opens_a_private_resumed_upstream() -> None:
    store, cache, opened = world()
    done(store.write(MeshNode(path="p/a")))
    held: list[QueryFrame] = []
    cache.get(QUERY).subscribe(held.append)
    old = held[-1].resume_token
    assert old is not None
    done(store.delete("p/a"))  # the chain moves on
    resumed: list[QueryFrame] = []
    cache.get(QUERY, old).subscribe(resumed.append)
    assert opened == [old]
    assert resumed[0].resumed and resumed[0].removed == ("p/a",)
    stats = cache.statistics()
    assert stats.resumed_upstreams == 1 and stats.resumed_on_chain == 0
    assert stats.entries == 1 and stats.upstream_subscriptions == 1  # not cached, not shared
    done(store.write(MeshNode(path="p/c")))  # the private upstream is live all the same
    assert [n.path for n in resumed[-1].nodes] == ["p/c"]


def test_a_foreign_token_never_raises_it_resets() -> None:
    store, cache, _ = world()
    done(store.write(MeshNode(path="p/a")))
    resumed: list[QueryFrame] = []
    errors: list[Exception] = []
    cache.get(QUERY, "not a token").subscribe(resumed.append, errors.append)
    assert errors == []
    assert resumed[0].kind is FrameKind.INITIAL and resumed[0].reset


def test_without_open_resumed_the_snapshot_is_marked_reset() -> None:
    store, cache, _ = world(resumable=False)
    done(store.write(MeshNode(path="p/a")))
    before: list[QueryFrame] = []
    cache.get(QUERY).subscribe(before.append)
    done(store.write(MeshNode(path="p/b")))
    resumed: list[QueryFrame] = []
    cache.get(QUERY, "m1.elsewhere.1").subscribe(resumed.append)
    assert resumed[0].kind is FrameKind.INITIAL and resumed[0].reset
    assert [n.path for n in resumed[0].nodes] == ["p/a", "p/b"]
    assert not before[0].reset  # negative control: a plain subscriber's snapshot is not marked
    fresh: list[QueryFrame] = []
    other = NodeQuery(partition="q")  # no chain yet: its first frame is marked when it comes
    cache.get(other, "m1.elsewhere.1").subscribe(fresh.append)
    assert fresh[0].kind is FrameKind.INITIAL and fresh[0].reset


def test_a_late_subscribers_snapshot_carries_the_latest_token() -> None:
    store, cache, _ = world()
    held: list[QueryFrame] = []
    cache.get(QUERY).subscribe(held.append)
    done(store.write(MeshNode(path="p/a")))
    late: list[QueryFrame] = []
    cache.get(QUERY).subscribe(late.append)
    assert late[0].kind is FrameKind.INITIAL
    assert late[0].resume_token == held[-1].resume_token != held[0].resume_token
