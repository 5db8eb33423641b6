"""rxmesh.providers._store.call: a store's coroutine twin when it runs the same step, else the
observable method (so an override of the observable method alone is honoured)."""

from __future__ import annotations

from reactivex import Observable

from rxmesh.aio import from_async
from rxmesh.model import MeshNode
from rxmesh.providers._store import call
from rxmesh.providers.memory import InMemoryStore


class OverridesRead(InMemoryStore):
    """A subclass that overrides only the observable ``read``."""

    def read(self, path: str) -> Observable[MeshNode | None]:
        async def marked() -> MeshNode | None:
            return MeshNode(path=path, content={"via": "read"})

        return from_async(marked)


class ObservableOnly:
    """A store with no coroutine twins at all (a third party's, say)."""

    def read(self, path: str) -> Observable[MeshNode | None]:
        async def found() -> MeshNode | None:
            return MeshNode(path=path, content={"via": "observable"})

        return from_async(found)


async def test_a_store_with_twins_is_awaited_directly() -> None:
    store = InMemoryStore()
    await call(store, "write", MeshNode(path="p/a", content={}))
    before = store.statistics().reads
    row = await call(store, "read", "p/a")
    assert row is not None
    assert store.statistics().reads == before + 1


async def test_an_override_of_the_observable_method_alone_is_honoured() -> None:
    row = await call(OverridesRead(), "read", "p/a")
    assert row is not None
    assert row.content == {"via": "read"}


async def test_an_instance_patch_of_the_observable_method_is_honoured() -> None:
    store = InMemoryStore()

    def patched(path: str) -> Observable[MeshNode | None]:
        async def marked() -> MeshNode | None:
            return MeshNode(path=path, content={"via": "patched"})

        return from_async(marked)

    store.read = patched  # type: ignore[method-assign]
    row = await call(store, "read", "p/a")
    assert row is not None
    assert row.content == {"via": "patched"}


async def test_a_store_without_twins_answers_through_its_observable() -> None:
    row = await call(ObservableOnly(), "read", "p/a")  # type: ignore[arg-type]
    assert row is not None
    assert row.content == {"via": "observable"}
