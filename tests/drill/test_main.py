"""``python -m rxmesh.drill`` runs the drill as ``python -m rxmesh drill`` does, with options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rxmesh.drill", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_python_dash_m_rxmesh_drill_passes_and_passes_its_options_on() -> None:
    done = _run("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert (last["event"], last["ok"]) == ("result", True)
    assert done.stderr == ""


def test_python_dash_m_rxmesh_drill_fails_when_sabotaged() -> None:
    # Negative control: the exit status is the drill's, not a constant.
    done = _run("--sabotage", "duplicate")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DRILL FAILED" in done.stdout
