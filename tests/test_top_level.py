"""``from rxmesh import ...`` is enough to start: every top-level name is its home module's own
object, and touching the top level imports no optional driver until ``PostgresStore`` itself."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rxmesh

PROBE = (
    "import sys, rxmesh\n"
    "from rxmesh import Mesh, MeshNode, NodeQuery, InMemoryStore, NodeExistsError\n"
    "print('asyncpg' in sys.modules)\n"
    "TOUCH\n"
    "print('asyncpg' in sys.modules)\n"
)


def _asyncpg_loaded(touch: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.replace("TOUCH", touch)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("name", rxmesh.__all__)
def test_each_top_level_name_is_its_home_modules_object(name: str) -> None:
    if name == "PostgresStore":
        pytest.importorskip("asyncpg")  # the [postgres] extra
    home = importlib.import_module(rxmesh._HOMES[name])
    assert getattr(rxmesh, name) is getattr(home, name)
    assert name in home.__all__, f"{home.__name__} does not export {name}"


def test_the_top_level_imports_no_driver_until_postgres_store_is_touched() -> None:
    pytest.importorskip("asyncpg")
    assert _asyncpg_loaded("pass") == ["False", "False"]


def test_negative_control_touching_postgres_store_imports_the_driver() -> None:
    pytest.importorskip("asyncpg")
    assert _asyncpg_loaded("rxmesh.PostgresStore") == ["False", "True"]


def test_every_name_rxmesh_lists_is_in_its_table_and_dir() -> None:
    assert set(rxmesh.__all__) == set(rxmesh._HOMES)
    assert set(rxmesh.__all__) <= set(dir(rxmesh))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rxmesh.Nope  # noqa: B018
