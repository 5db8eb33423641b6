"""``rxmesh import`` starts without importing the drill (most of rxmesh): the parser registers
only the command it is given. ``--help`` (and a command it does not know) still lists them all."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _imports_drill(argv: list[str]) -> bool:
    code = (
        "import sys\n"
        "from rxmesh import cli\n"
        f"cli._parser({argv!r})\n"
        "print('rxmesh.drill' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.strip() == "True"


def test_an_import_does_not_import_the_drill() -> None:
    assert not _imports_drill(["import", "nodes/", "--dsn", "memory://"])
    assert not _imports_drill(["--log-level", "DEBUG", "import", "nodes/"])


@pytest.mark.parametrize("argv", [["--help"], ["drill"], ["nope"], []])
def test_negative_control_help_the_drill_and_unknown_commands_register_it(argv: list[str]) -> None:
    assert _imports_drill(argv)
