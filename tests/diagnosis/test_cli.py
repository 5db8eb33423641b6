"""The `rxmesh triage` command: through main(), and through `python -m rxmesh` once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from loguru import logger

from rxmesh import cli
from rxmesh.diagnosis import report_store_unreachable
from tests.diagnosis import _logs as logs


@pytest.fixture
def clustered_log(tmp_path: Path) -> Path:
    path = tmp_path / "service.log"
    path.write_text("\n".join([*logs.clustered(), "garbage"]) + "\n", encoding="utf-8")
    return path


def test_triage_prints_the_figures_and_the_reading(
    clustered_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["triage", str(clustered_log)]) == 0
    out = capsys.readouterr().out
    assert "store-unreachable events: 10\n" in out
    assert "within a 5 s shadow of a stall: 9 of 10 (90.0%)\n" in out
    assert "note: skipped 1 malformed lines (line 17: not JSON)\n" in out
    assert out.rstrip().endswith(
        "reading: process-side stalls explain 90.0% of the timeouts; the store is probably fine"
    )


def test_triage_options_change_the_shadow_and_the_adjacency(
    clustered_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["triage", str(clustered_log), "--shadow", "1", "--adjacent", "0.04"]) == 0
    out = capsys.readouterr().out
    assert "within 0.04 s after a stall: 4 of 10 (40.0%)\n" in out
    assert "within a 1 s shadow of a stall: 7 of 10 (70.0%)\n" in out


def test_a_missing_log_is_an_error_message_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["triage", str(tmp_path / "absent.log")]) == 2
    err = capsys.readouterr().err
    assert "rxmesh triage: cannot read" in err
    assert "No such file or directory" in err


def test_a_negative_shadow_is_refused_by_the_parser(clustered_log: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["triage", str(clustered_log), "--shadow", "-1"])
    assert exited.value.code == 2


def test_a_command_is_required() -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([])
    assert exited.value.code == 2


def test_main_leaves_rxmesh_logging_as_it_found_it(
    clustered_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []
    sink = logger.add(seen.append, filter="rxmesh")
    try:
        cli.main(["triage", str(clustered_log)])
        report_store_unreachable("store 'x' unreachable")  # rxmesh is disabled again
    finally:
        logger.remove(sink)
    capsys.readouterr()
    assert seen == []


def test_every_command_is_one_registration_function() -> None:
    assert cli._add_triage in cli._COMMANDS
    assert len(set(cli._COMMANDS)) == len(cli._COMMANDS)


def test_python_dash_m_rxmesh_triage_works(clustered_log: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rxmesh", "triage", str(clustered_log)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "reading: process-side stalls explain 90.0%" in done.stdout
