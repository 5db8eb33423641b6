"""The importer's reading shortcuts give what the long way gave: the pauses of ``read_stream``
(the same windows, ``None`` between entries), the node types already seen (a set lookup; a bad
type still refused with the model's reason), and the fields set every built node shares."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import rxmesh.importer as importer
from rxmesh import Mesh
from rxmesh.importer._read import (
    ImportProblem,
    Window,
    check_node,
    read_stream,
    read_windows,
    trusted_node,
)
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import MeshNode
from rxmesh.providers.memory import InMemoryStore


def _entries(directory: Path) -> Path:
    directory.mkdir()
    lines = []
    for i in range(230):
        lines.append(json.dumps({"path": f"a/n{i}", "node_type": "Item", "content": {"i": i}}))
        if i % 40 == 7:
            lines.append("{not json")
        if i % 50 == 9:
            lines.append(json.dumps({"path": "a/n1", "content": 1}))  # a duplicate
        if i % 60 == 11:
            lines.append(json.dumps({"path": f"a/t{i}", "node_type": "1 bad type"}))
    (directory / "a.jsonl").write_text("\n".join(lines) + "\n")
    (directory / "b.json").write_text(json.dumps([{"path": "b/x", "node_type": "Other"}]))
    return directory


def _shape(windows: list[Window]) -> list[tuple[list[tuple[str, str, int | None]], list[str]]]:
    return [
        ([(item.node.path, item.file, item.line) for item in w.items], [str(p) for p in w.problems])
        for w in windows
    ]


@pytest.mark.parametrize("pause_every", [1, 7, 50, 1000])
def test_a_stream_with_pauses_holds_the_same_windows(tmp_path: Path, pause_every: int) -> None:
    directory = _entries(tmp_path / "in")
    _, plain = read_windows(directory, partition="p", window=64)
    files, stream = read_stream(directory, partition="p", window=64, pause_every=pause_every)
    assert files == 2
    read = list(stream)
    windows = [w for w in read if w is not None]
    assert _shape(windows) == _shape(list(plain))
    entries = sum(len(w.items) + len(w.problems) for w in windows)
    pauses = len(read) - len(windows)
    assert pauses >= (entries - 64 * len(windows)) // pause_every  # a pause every so often
    assert pauses <= entries // pause_every


def test_negative_control_no_pause_without_pause_every(tmp_path: Path) -> None:
    _, stream = read_stream(_entries(tmp_path / "in"), window=64)
    assert None not in list(stream)


@pytest.mark.parametrize("pause_every", [0, 3])
async def test_an_import_reports_the_same_with_or_without_pauses(
    tmp_path: Path, pause_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importer, "_PAUSE_EVERY", pause_every)
    directory = _entries(tmp_path / "in")
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    try:
        report = await importer.import_directory(directory, mesh, partition="p", window=64)
    finally:
        mesh.dispose()
    assert (report.items, report.created, report.already_present) == (246, 231, 0)
    problems = [(p.file, p.line, p.reason) for p in report.refused]
    assert len(problems) == 15 and problems[0][:2] == ("a.jsonl", 9)
    assert dataclasses.replace(report, seconds=0.0).exit_status == importer.EXIT_REFUSED


def _one(tmp_path: Path, *node_types: str) -> list[ImportProblem]:
    directory = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    lines = [json.dumps({"path": f"a/n{i}", "node_type": t}) for i, t in enumerate(node_types)]
    (directory / "a.jsonl").write_text("\n".join(lines))
    _, windows = read_windows(directory)
    return [p for w in windows for p in w.problems]


@pytest.mark.parametrize("bad", ["1bad", "Item ", "Item\n", "", "x" * 129, "It em"])
def test_a_bad_node_type_is_refused_after_good_ones_as_the_model_refuses_it(
    tmp_path: Path, bad: str
) -> None:
    problems = _one(tmp_path, "Item", "Item", bad, "Item", bad)
    with pytest.raises(ValueError) as refused:
        check_node(trusted_node("a/n2", bad, None))
    reason = str(refused.value)
    assert [(p.line, p.reason) for p in problems] == [(3, reason), (5, reason)]
    assert "node_type" in str(refused.value)


def test_negative_control_good_node_types_are_not_refused(tmp_path: Path) -> None:
    assert _one(tmp_path, "Item", "a.b:c-d_e", "X" * 128, "Item") == []


def test_a_built_node_is_the_validated_one_and_shares_nothing_it_could_change() -> None:
    built = trusted_node("a/b", "Item", {"k": [1]})
    validated = MeshNode(path="a/b", node_type="Item", content={"k": [1]})
    assert built == validated
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    other = trusted_node("a/c", None, 1)
    copied = built.model_copy(update={"version": 3})
    assert copied.model_fields_set == {"path", "node_type", "content", "version"}
    assert other.model_fields_set == {"path", "node_type", "content"}  # the shared set untouched
    assert MeshNode(path="a/b").model_fields_set != built.model_fields_set  # the control
