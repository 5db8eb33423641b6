"""``python -m rxmesh``: the command line (see :mod:`rxmesh.cli`)."""

from __future__ import annotations

from rxmesh.cli import run

__all__: list[str] = []

if __name__ == "__main__":
    run()
