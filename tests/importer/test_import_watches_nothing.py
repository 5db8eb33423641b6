"""The import's mesh keeps no partition facts between windows, so nothing watches the store's
announced commits while it writes (an announcement per row written would be built for the
watcher); each window reads the facts it is judged on. The answers are the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable

import rxmesh.providers.memory as memory
from rxmesh import CreateNodesRequest, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.importer import EXIT_OK
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import AccessContext, WindowCommitted


class _Counting(memory.InMemoryStore):
    """Notes how many watch ``answers_again`` at each bulk write."""

    watchers: list[int]

    def write_many(self, nodes: Any, window: int = 1000) -> Observable[WindowCommitted]:
        type(self).watchers.append(len(self._answers.observers))
        return super().write_many(nodes, window)


def _directory(tmp_path: Path) -> Path:
    lines = [json.dumps({"path": f"n{i}", "node_type": "Item"}) for i in range(25)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_nothing_watches_the_announcements_during_an_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rxmesh import cli

    _Counting.watchers = []
    monkeypatch.setattr(memory, "InMemoryStore", _Counting)
    argv = ["import", str(_directory(tmp_path)), "--dsn", "memory://", "--partition", "p"]
    assert cli.main([*argv, "--window", "10", "--no-progress"]) == EXIT_OK
    assert "created           25\n" in capsys.readouterr().out
    assert _Counting.watchers == [0, 0, 0]  # three windows, none watched


async def test_negative_control_a_default_mesh_watches_them() -> None:
    _Counting.watchers = []
    store = _Counting()
    # No recovery (it watches them too, and the import without a journal arms none): only the
    # partition facts kept between operations watch here.
    mesh = Mesh(store, ledger=PendingWriteLedger(""), recover_pending_writes=False)
    try:
        for name in ("a", "b"):
            node = MeshNode(path=f"p/{name}", node_type="Item")
            request = CreateNodesRequest(nodes=(node,), access=AccessContext(user="u"))
            assert (await first_value(mesh.create_nodes(request), timeout=10)).success
    finally:
        mesh.dispose()
    assert _Counting.watchers[-1] > 0
