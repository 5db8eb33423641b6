"""Update, delete and move intents on real PostgreSQL (issue 18): recorded during an outage (a
real one, through a FaultProxy), kept over a restart in a journal, re-issued once on the
store's own evidence (its verified start), by compare-and-set — so a newer write made by another
process in between survives. Negative control: the same with the version check skipped in the
mesh and the statement (a mutant) overwrites it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from rxmesh import Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.mesh import _verbs as verbs_module
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.helpers import ALICE, Outcomes
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

LADDER = (0.01, 0.01)
OPTIONS: dict[str, Any] = {
    "connect_timeout": 0.5,
    "command_timeout": 1.0,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 0.5,
    "reconnect_backoff": (0.05, 0.1),
}
VERBS = ["update", "delete", "move"]


def doc(path: str, **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content=content or {"v": 0})


def request(verb: str, seed: str) -> UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest:
    """Each verb of ``p/a``, based on the seed's version (1) and the seed's request id (the
    outage refuses its read too: the request names its whole basis, so it is recorded)."""
    basis: dict[str, Any] = {"expected_version": 1, "expected_request_id": seed}
    if verb == "update":
        return UpdateNodeRequest(node=doc("p/a", v=2), access=ALICE, **basis)
    if verb == "delete":
        return DeleteNodeRequest(path="p/a", access=ALICE, **basis)
    return MoveNodeRequest(source="p/a", target="p/z", access=ALICE, **basis)


async def send(mesh: Mesh, req: Any) -> NodeOperationResponse:
    async with asyncio.timeout(20):
        if isinstance(req, UpdateNodeRequest):
            return await first_value(mesh.update_node(req))
        if isinstance(req, DeleteNodeRequest):
            return await first_value(mesh.delete_node(req))
        return await first_value(mesh.move_node(req))


@asynccontextmanager
async def proxied(dsn: str, prefix: str) -> AsyncIterator[tuple[PostgresStore, FaultProxy]]:
    target = urlparse(dsn)
    async with (
        FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy,
        started(proxy.dsn(dsn), prefix, **OPTIONS) as store,
    ):
        try:
            yield store, proxy
        finally:
            await proxy.restore()


async def recorded_in_an_outage(
    verb: str, dsn: str, prefix: str, journal: Path
) -> tuple[str, list[str]]:
    """A mesh through a proxy seeds ``p/a``; the proxy refuses; ``verb`` is answered UNAVAILABLE
    and journaled; the process ends (the mesh and its store are closed)."""
    async with proxied(dsn, prefix) as (store, proxy):
        mesh = Mesh(store, retry_delays=LADDER, ledger=PendingWriteLedger(journal))
        seed = await mesh.create(doc("p/a"), access=ALICE)
        assert seed.request_id is not None
        proxy.refuse()
        proxy.reset()
        answer = await send(mesh, request(verb, seed.request_id))
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
        assert answer.recorded_for_reissue, answer
        assert "Nothing was written" in (answer.error or "")
        keys = [i.key for i in mesh.ledger.pending()]
        mesh.dispose()
    return answer.request_id, keys


async def restarted(
    dsn: str, prefix: str, journal: Path, *, newer_write: bool
) -> tuple[PendingWriteOutcome, dict[str, MeshNode]]:
    """A new process: a new ledger over the journal, a mesh on the real server whose verified
    start is the evidence. Another process wrote ``p/a`` meanwhile when ``newer_write``."""
    async with started(dsn, prefix, **OPTIONS) as store, started(dsn, prefix) as other:
        ledger = PendingWriteLedger(journal)
        assert len(ledger.pending()) == 1  # loaded, waiting for evidence (loading is not)
        collected = Outcomes(ledger)
        if newer_write:  # while this process was away, another one updated the node: version 2
            await other.update(doc("p/a", v="newer"), None, None, "another-process")
        # The store's verified start is the evidence: the mesh re-issues as it is built.
        mesh = Mesh(store, retry_delays=LADDER, ledger=ledger)
        (outcome,) = await collected.wait(1, timeout=20)
        rows = {n.path: n for n in (await store.read_many(["p/a", "p/z"])).values()}
        mesh.dispose()
        ledger.close()
        assert PendingWriteLedger(journal).pending() == ()  # settled, also on disk
    return outcome, rows


@pytest.mark.parametrize("verb", VERBS)
async def test_each_verb_recorded_in_a_real_outage_is_reissued_after_a_restart(
    verb: str, pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    request_id, keys = await recorded_in_an_outage(verb, pg_dsn, prefix, tmp_path / "j")
    assert keys == [f"p/a {verb}"]
    outcome, rows = await restarted(pg_dsn, prefix, tmp_path / "j", newer_write=False)
    assert outcome.verdict is Verdict.LANDED, outcome
    if verb == "update":
        assert rows["p/a"].content == {"v": 2} and rows["p/a"].request_id == request_id
        assert rows["p/a"].version == 2
    elif verb == "delete":
        assert rows == {}
    else:
        assert set(rows) == {"p/z"} and rows["p/z"].request_id == request_id


@pytest.mark.parametrize("verb", VERBS)
async def test_a_newer_write_by_another_process_survives_the_reissue(
    verb: str, pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    await recorded_in_an_outage(verb, pg_dsn, prefix, tmp_path / "j")
    outcome, rows = await restarted(pg_dsn, prefix, tmp_path / "j", newer_write=True)
    assert outcome.verdict is Verdict.CONFLICT, outcome
    assert outcome.reason is RejectionReason.VERSION_CONFLICT
    assert rows["p/a"].content == {"v": "newer"} and rows["p/a"].request_id == "another-process"
    assert "p/z" not in rows


@pytest.mark.parametrize("verb", VERBS)
async def test_negative_control_without_the_version_check_the_newer_write_is_lost(
    verb: str, pg_dsn: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the mesh skips its check and the statements get no basis."""
    monkeypatch.setattr(verbs_module, "_check", lambda *args: None)
    for name in ("update", "delete", "move"):
        original = getattr(PostgresStore, name)

        def without_basis(self: PostgresStore, *args: Any, _original: Any = original) -> Any:
            arity = 2 if _original.__name__ == "move" else 1
            positional = [*args[:arity], None, None, *args[arity + 2 :]]
            return _original(self, *positional)

        without_basis.__name__ = name
        monkeypatch.setattr(PostgresStore, name, without_basis)
    await recorded_in_an_outage(verb, pg_dsn, prefix, tmp_path / "j")
    outcome, rows = await restarted(pg_dsn, prefix, tmp_path / "j", newer_write=True)
    assert outcome.verdict is Verdict.LANDED  # the newer write was overwritten / removed
    assert rows.get("p/a") is None or rows["p/a"].content == {"v": 2}
