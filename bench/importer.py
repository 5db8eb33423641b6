"""``rxmesh import`` against a raw asyncpg COPY of the same rows from the same file (JSON lines).

Usage::

    python -m bench.importer [--dsn DSN] [--rows 100000] [--repeat 3] [--window 1000]

Both contenders run as a child process of their own, interleaved (import, copy, import, copy,
...), so each one's CPU time and peak RSS are its own (``os.wait4``):

- ``import``: ``python -m rxmesh import DIR --dsn DSN --partition P --no-progress``, the command
  a person runs: reading, validation, the mesh's checks, the store's bulk write, the change feed.
- ``copy``: a few lines of asyncpg that read the same file line by line, ``json.loads`` each line
  and ``copy_records_to_table`` the rows in windows of ``--window`` into a plain table of the same
  columns (primary key on ``path``, no trigger, no conflict handling, no validation).

Lines printed (medians of ``--repeat`` rounds):

- ``importer``: nodes/s of both (wall clock of the whole command, interpreter start included),
  CPU seconds, peak RSS in MB, the ratios, and the target (``import_nodes_per_s >= 40000``).
- ``importer_memory``: the import's peak RSS at ``--rows`` and at a tenth of it: flat memory
  means the two are close (``rss_growth_mb``), not proportional to the rows.

The children run with a bytecode cache of their own (``PYTHONPYCACHEPREFIX`` in a temporary
directory, ``PYTHONDONTWRITEBYTECODE`` dropped, one unmeasured warm-up of each first), as an
installed package runs from its ``.pyc`` files: in a shell that sets ``PYTHONDONTWRITEBYTECODE``
every run would otherwise compile rxmesh from source (about 0.1 s of the import's start).
``--no-bytecode-cache`` passes the environment through unchanged; the ``importer`` line says
which (``bytecode_cache``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

DEFAULT_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TARGET_NODES_PER_S = 40_000

_COPY_CHILD = """
import asyncio, json, sys
from datetime import UTC, datetime
import asyncpg

async def main(dsn, path, schema, window):
    conn = await asyncpg.connect(dsn)
    now = datetime.now(UTC)
    columns = ["path", "node_type", "content", "created_by", "created_at", "version",
               "request_id"]
    rows = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                value = json.loads(line)
                content = value.get("content")
                rows.append((schema + "/" + value["path"], value.get("node_type"),
                             None if content is None else json.dumps(content), "bench", now, 1,
                             "raw"))
                if len(rows) == window:
                    await conn.copy_records_to_table("raw", schema_name=schema, records=rows,
                                                     columns=columns)
                    rows = []
        if rows:
            await conn.copy_records_to_table("raw", schema_name=schema, records=rows,
                                             columns=columns)
    finally:
        await conn.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


def write_nodes(directory: Path, rows: int) -> Path:
    """``rows`` JSON-lines nodes in ONE file (small contents of a few dozen bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nodes.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(rows):
            node = {
                "path": f"d{i % 10}/n{i:07d}",
                "node_type": "Item",
                "content": {"i": i, "text": "small node content of a few dozen bytes"},
            }
            handle.write(json.dumps(node) + "\n")
    return path


_ENV: dict[str, str] | None = None
"""The children's environment (``None``: this process's own)."""


def _child(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` to its end; its wall time, CPU seconds, peak RSS (MB) and output, its own."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=_ENV)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, problems = out.read().decode(), err.read().decode()
    if process.returncode != 0:
        raise RuntimeError(
            f"{argv[:5]} exited {process.returncode}: {text[-500:]} {problems[-2000:]}"
        )
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "output": text,
    }


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _run_import(dsn: str, directory: Path, partition: str, window: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "rxmesh", "import", str(directory), "--dsn", dsn]
    argv += ["--partition", partition, "--no-progress", "--window", str(window)]
    try:
        result = _child(argv)
        assert "exit status 0" in result["output"], result["output"]
        return result
    finally:
        asyncio.run(_admin(dsn, f'DROP SCHEMA IF EXISTS "rxmesh_{partition}" CASCADE'))


def _run_copy(dsn: str, file: Path, schema: str, window: int) -> dict[str, Any]:
    asyncio.run(_admin(dsn, f'TRUNCATE "{schema}".raw'))
    return _child([sys.executable, "-c", _COPY_CHILD, dsn, str(file), schema, str(window)])


def _bytecode_cache(directory: Path) -> dict[str, str]:
    """This environment with a bytecode cache under ``directory`` (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(directory)
    return env


def measure(
    dsn: str, rows: int, repeat: int, window: int, *, bytecode_cache: bool = True
) -> list[dict[str, Any]]:
    """Interleave the import and the raw COPY ``repeat`` times; the two JSON lines."""
    global _ENV
    schema = f"rxbi{uuid.uuid4().hex[:8]}"
    asyncio.run(
        _admin(
            dsn,
            f'CREATE SCHEMA "{schema}"; CREATE TABLE "{schema}".raw (path text PRIMARY KEY,'
            " node_type text, content jsonb, created_by text, created_at timestamptz,"
            " version bigint NOT NULL DEFAULT 0, request_id text)",
        )
    )
    runs: dict[str, list[dict[str, Any]]] = {"import": [], "copy": []}
    try:
        with tempfile.TemporaryDirectory(prefix="rxmesh-bench-import-") as tmp:
            big, small = Path(tmp) / "big", Path(tmp) / "small"
            file = write_nodes(big, rows)
            write_nodes(small, max(1, rows // 10))
            _ENV = _bytecode_cache(Path(tmp) / "pycache") if bytecode_cache else None
            if bytecode_cache:  # the warm-up: each child's modules compiled once, not measured
                warm = write_nodes(Path(tmp) / "warm", 10)
                _run_import(dsn, warm.parent, f"bi{uuid.uuid4().hex[:8]}", window)
                _run_copy(dsn, warm, schema, window)
            for _ in range(repeat):
                partition = f"bi{uuid.uuid4().hex[:8]}"
                runs["import"].append(_run_import(dsn, big, partition, window))
                runs["copy"].append(_run_copy(dsn, file, schema, window))
            small_rss = _run_import(dsn, small, f"bi{uuid.uuid4().hex[:8]}", window)["rss_mb"]
    finally:
        _ENV = None
        asyncio.run(_admin(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))

    def median(kind: str, key: str) -> float:
        return float(statistics.median(float(run[key]) for run in runs[kind]))

    rate = {kind: rows / median(kind, "wall_s") for kind in runs}
    cpu = {kind: median(kind, "cpu_s") for kind in runs}
    rss = {kind: median(kind, "rss_mb") for kind in runs}
    return [
        {
            "bench": "importer",
            "rows": rows,
            "window": window,
            "repeat": repeat,
            "nodes_per_s": {k: round(v) for k, v in rate.items()},
            "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
            "cpu_us_per_node": {k: round(v / rows * 1e6, 1) for k, v in cpu.items()},
            "peak_rss_mb": {k: round(v, 1) for k, v in rss.items()},
            "ratio_vs_copy": round(rate["import"] / rate["copy"], 3),
            "spread_import_nodes_per_s": [round(rows / r["wall_s"]) for r in runs["import"]],
            "target_import_nodes_per_s": TARGET_NODES_PER_S,
            "bytecode_cache": bytecode_cache,
        },
        {
            "bench": "importer_memory",
            "rows": {"small": max(1, rows // 10), "big": rows},
            "import_peak_rss_mb": {"small": round(small_rss, 1), "big": round(rss["import"], 1)},
            "rss_growth_mb": round(rss["import"] - small_rss, 1),
        },
    ]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the bench and print one JSON line per figure."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run the children in this environment as it is (see the module docstring)",
    )
    args = parser.parse_args(argv)
    lines = measure(
        args.dsn, args.rows, args.repeat, args.window, bytecode_cache=not args.no_bytecode_cache
    )
    for line in lines:
        print(json.dumps(line), flush=True)
    return lines


if __name__ == "__main__":
    main()
