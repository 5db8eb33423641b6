"""The outage drill against PostgreSQL through a real transaction-pooling PgBouncer (issue 14):
``--dsn`` the pooler, ``--listen-dsn`` the server. Without ``--listen-dsn`` the store refuses to
start, and the CLI says why and what to pass (exit status 2, no traceback)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from rxmesh.drill import run_drill
from rxmesh.providers.postgres import ChangeFeedUnverifiedError

pytestmark = pytest.mark.postgres


async def test_the_drill_passes_through_a_pooler_with_a_direct_listen_dsn(
    pg_dsn: str, pgbouncer_dsn: str
) -> None:
    out = io.StringIO()
    result = await run_drill(dsn=pgbouncer_dsn, listen_dsn=pg_dsn, out=out, timeout=20.0)
    text = out.getvalue()
    assert result.ok, text
    assert "through a connection pooler" in text
    assert "DRILL PASSED" in text


async def test_the_drill_through_a_pooler_without_listen_dsn_refuses_saying_what_to_pass(
    pgbouncer_dsn: str,
) -> None:
    with pytest.raises(ChangeFeedUnverifiedError, match="listen_dsn="):
        await run_drill(dsn=pgbouncer_dsn, out=io.StringIO(), timeout=20.0)


def test_the_drill_cli_through_a_pooler_without_listen_dsn_exits_2_naming_the_option(
    pgbouncer_dsn: str,
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "rxmesh", "drill", "--dsn", pgbouncer_dsn],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert "the store refused to start" in completed.stderr
    assert "--listen-dsn" in completed.stderr
    assert "Traceback" not in completed.stderr
