"""``python -m rxmesh.drill [options]``: the same as ``python -m rxmesh drill [options]``."""

from __future__ import annotations

import sys

from rxmesh.cli import run

__all__: list[str] = []

if __name__ == "__main__":
    sys.argv[1:1] = ["drill"]
    run()
