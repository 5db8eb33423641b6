"""A process the CLI owns (``rxmesh.cli.run``) freezes its start-up objects once the command's
modules are imported, before the command runs; ``cli.main`` called by someone else does not."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from rxmesh import cli


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, freeze: bool) -> list[bool]:
    (tmp_path / "a.jsonl").write_text('{"path": "a/b", "node_type": "Item"}\n')
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    argv = ["import", str(tmp_path), "--dsn", "memory://", "--no-progress"]
    assert cli.main(argv, freeze=freeze) == 0
    return frozen


def test_the_cli_s_own_process_is_frozen_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(tmp_path, monkeypatch, freeze=True) == [True]


def test_negative_control_a_caller_s_process_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(tmp_path, monkeypatch, freeze=False) == []


def test_run_asks_for_the_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []

    def main(argv: object = None, *, freeze: bool = False) -> int:
        asked.append(freeze)
        return 0

    monkeypatch.setattr(cli, "main", main)
    monkeypatch.setattr(cli.logger, "remove", lambda *_: None)  # the test process's sinks stay
    with pytest.raises(SystemExit):
        cli.run()
    assert asked == [True]
