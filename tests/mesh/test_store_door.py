"""Every store call of the mesh goes through one door: the ``ask`` methods of ``MeshCore``.

Two checks. The first reads the source of every module of ``rxmesh/mesh`` and refuses a call of
a store verb (called, or taken as a value to call later) or the ladder anywhere but in the
door. The second runs every verb (create, the bulk, update, delete, move; a fault and its
probe too) over a store that records, for each call, whether it came through the door. Each has
its negative control: the checker flags the direct calls the create and the bulk once made, and
the store sees a create that writes past the door.
"""

from __future__ import annotations

import ast
import contextvars
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable

import rxmesh.mesh
from rxmesh import CreateNodeRequest, CreateNodesRequest, Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh._core import MeshCore, now, stamp
from rxmesh.mesh._create import Create
from rxmesh.model import AccessContext, WindowCommitted
from rxmesh.operations import DeleteNodeRequest, MoveNodeRequest, UpdateNodeRequest
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE

from .conftest import FAST

MESH = Path(rxmesh.mesh.__file__).parent
VERBS = ("read", "read_many", "write", "write_many", "update", "delete", "move")
DOOR = {("_core.py", "ask"), ("_core.py", "ask_stream"), ("_core.py", "ask_once")}
DOOR_HELPERS = {("_core.py", "_noting")}  # what ask runs when told of each failed try
STORES = {"store", "_store"}


# ---------------------------------------------------------------- the source


def _is_store(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in STORES
    return isinstance(node, ast.Attribute) and node.attr in STORES


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node of ``tree`` with the name of the function that holds it (``""``: none)."""

    def walk(node: ast.AST, where: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = where or child.name  # a nested function is its holder's
            yield inner, child
            yield from walk(child, inner)

    return walk(tree, "")


def store_calls_past_the_door(source: str, module: str) -> list[str]:
    """Where ``source`` (the module ``module`` of the mesh) reaches the store but through the
    door: a store verb called or taken as a value (``store.write``, ``observe(store.read, p)``),
    the store handed to ``getattr``, or the ladder used (the door's retry)."""
    found: list[str] = []
    tree = ast.parse(source)
    for function, node in _functions(tree):
        if (module, function) in DOOR | DOOR_HELPERS:
            continue
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in VERBS and _is_store(node.value):
            found.append(f"{where} reaches store.{node.attr}")
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Name)
                and func.id == "getattr"
                and node.args
                and _is_store(node.args[0])
            ):
                found.append(f"{where} looks a store method up by name")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("ladder", "_retry")
            and (module, function) != ("_core.py", "__init__")
        ):
            found.append(f"{where} uses the ladder")
    return found


def test_no_module_of_the_mesh_reaches_the_store_but_through_the_door() -> None:
    modules = sorted(MESH.glob("*.py"))
    assert len(modules) > 10  # the checker reads the package, not an empty folder
    found = [
        line for path in modules for line in store_calls_past_the_door(path.read_text(), path.name)
    ]
    assert found == []
    core = ast.parse((MESH / "_core.py").read_text())
    defined = {
        ("_core.py", node.name)
        for node in ast.walk(core)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert defined >= DOOR | DOOR_HELPERS  # the door the checker exempts is there


_CREATE_PAST_THE_DOOR = """
async def _write(self, req, access, facts):
    core, node = self._core, req.node
    store = core.store
    write = functools.partial(store.write, stamped)
    return await core.ladder.call(write, scheduler=core.scheduler)
"""

_BULK_PAST_THE_DOOR = """
async def _bulk(self, req, state):
    core = self._core
    await _drain(core.retried(core.store.write_many(stamped, req.window)), on_item)

async def _fault(self, req, state, exc):
    found = await self._core.store.read_many(unsettled)
    method = getattr(self._core.store, "read_many")
"""


def test_negative_control_the_checker_flags_the_direct_calls_the_create_and_bulk_made() -> None:
    create = store_calls_past_the_door(_CREATE_PAST_THE_DOOR, "_create.py")
    assert any("reaches store.write" in line for line in create), create
    assert any("uses the ladder" in line for line in create), create
    bulk = store_calls_past_the_door(_BULK_PAST_THE_DOOR, "_bulk.py")
    assert any("store.write_many" in line for line in bulk), bulk
    assert any("store.read_many" in line for line in bulk), bulk
    assert any("by name" in line for line in bulk), bulk
    # The same calls inside the door are its own.
    inside = _CREATE_PAST_THE_DOOR.replace("_write", "ask")
    assert store_calls_past_the_door(inside, "_core.py") == []


# ---------------------------------------------------------------- the calls, as they happen

_IN_DOOR: contextvars.ContextVar[bool] = contextvars.ContextVar("in_door", default=False)


class _RecordingStore(FaultInjectingStore):
    """Records each verb called on it, and whether the call came through the door (the store
    the mesh is given: the fault injector calls its inner store's stream when subscribed)."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore())
        self.calls: list[tuple[str, bool]] = []

    def seen(self, operation: str) -> None:
        self.calls.append((operation, _IN_DOOR.get()))

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = 1000
    ) -> Observable[WindowCommitted]:
        self.seen("write_many")
        return super().write_many(nodes, window)


def _recorded(operation: str) -> Callable[..., Any]:
    async def verb(self: _RecordingStore, *args: Any) -> Any:
        self.seen(operation)
        return await getattr(FaultInjectingStore, operation)(self, *args)

    return verb


for _operation in ("read", "read_many", "write", "update", "delete", "move"):
    setattr(_RecordingStore, _operation, _recorded(_operation))


def _mark_the_door(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call through the door runs with ``_IN_DOOR`` set (the store sees it)."""
    for name in ("ask", "ask_once"):
        real = getattr(MeshCore, name)

        def through(core: MeshCore, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            async def inside() -> Any:
                token = _IN_DOOR.set(True)
                try:
                    return await _real(core, *args, **kwargs)
                finally:
                    _IN_DOOR.reset(token)

            return inside()

        monkeypatch.setattr(MeshCore, name, through)
    stream = MeshCore.ask_stream

    def streamed(core: MeshCore, *args: Any) -> Any:
        token = _IN_DOOR.set(True)
        try:
            return stream(core, *args)
        finally:
            _IN_DOOR.reset(token)

    monkeypatch.setattr(MeshCore, "ask_stream", streamed)


async def _every_verb(monkeypatch: pytest.MonkeyPatch) -> _RecordingStore:
    _mark_the_door(monkeypatch)
    store = _RecordingStore()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    bob = AccessContext(user="bob")
    answers = [
        await first_value(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))
        for node in (MeshNode(path="a/x", content={}), MeshNode(path="a/y", content={}))
    ]
    answers.append(
        await first_value(
            mesh.create_node(CreateNodeRequest(node=MeshNode(path="a/x", content={}), access=bob))
        )
    )
    bulk = tuple(MeshNode(path=f"a/b{i}", content={"i": i}) for i in range(5))
    answers.append(
        await first_value(mesh.create_nodes(CreateNodesRequest(nodes=bulk, access=ALICE)))
    )
    update = UpdateNodeRequest(node=MeshNode(path="a/x", content={"v": 2}), access=ALICE)
    answers.append(await first_value(mesh.update_node(update)))
    answers.append(
        await first_value(mesh.move_node(MoveNodeRequest(source="a/y", target="c/y", access=ALICE)))
    )
    answers.append(
        await first_value(mesh.delete_node(DeleteNodeRequest(path="a/b0", access=ALICE)))
    )
    assert [answer.success for answer in answers] == [True, True, False, True, True, True, True]
    store.refuse_writes_as_unreachable()  # a fault once the bulk's write started: its probe
    refused = tuple(MeshNode(path=f"a/r{i}", content={}) for i in range(3))
    answer = await first_value(mesh.create_nodes(CreateNodesRequest(nodes=refused, access=ALICE)))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    mesh.dispose()
    return store


async def test_every_verb_calls_the_store_through_the_door(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = await _every_verb(monkeypatch)
    assert {operation for operation, _ in store.calls} >= {
        "read",
        "read_many",
        "write",
        "write_many",
        "update",
        "delete",
        "move",
    }
    assert [operation for operation, inside in store.calls if not inside] == []


async def test_negative_control_a_create_writing_past_the_door_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def _write(
        self: Create, req: CreateNodeRequest, access: AccessContext, facts: Any
    ) -> Any:
        return await self._core.store.write(stamp(req.node, access.user, now(), None))

    monkeypatch.setattr(Create, "_write", _write)
    store = await _every_verb(monkeypatch)
    assert [operation for operation, inside in store.calls if not inside] == ["write", "write"]
