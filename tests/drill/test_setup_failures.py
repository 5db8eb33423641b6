"""``rxmesh drill`` that cannot begin exits 2 with one line, never 1 ("an invariant broke") with
a driver's traceback; and the embedded drill's timeline names no server it never connected to.

Fail at 1d389e8 because: a missing database, an unknown role and a ``mysql://`` DSN raised the
asyncpg exception out of ``rxmesh drill`` (a traceback, exit status 1); the embedded drill printed
"Connect call failed ('127.0.0.1', 5432)"; it said "journaled as segment-0000..." where the
quickstart said "as a file". Negative controls: a failure after the drill began is not turned
into a setup error; the sabotaged drill still exits 1.
"""

from __future__ import annotations

import asyncio
import io
from urllib.parse import urlparse, urlunparse

import pytest

from rxmesh import cli
from rxmesh.drill import _runner as runner
from rxmesh.drill import run_drill
from rxmesh.exceptions import DrillSetupError
from tests.helpers import ROOT


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rxmesh drill: ")
    return lines[0]


def test_a_dsn_that_is_not_postgresql_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_exit_2(["drill", "--dsn", "mysql://app:secret@127.0.0.1/db"], capsys)
    assert "--dsn must be a PostgreSQL DSN" in line and "'mysql'" in line
    assert "secret" not in line  # only the scheme is repeated


@pytest.mark.postgres
def test_a_missing_database_exits_2_naming_it(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = urlunparse(urlparse(pg_dsn)._replace(path="/rxmesh_no_such_database"))
    line = one_line_exit_2(["drill", "--dsn", missing], capsys)
    assert "could not begin" in line and "rxmesh_no_such_database" in line


@pytest.mark.postgres
def test_an_unknown_role_exits_2_naming_it(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    parsed = urlparse(pg_dsn)
    unknown = urlunparse(parsed._replace(netloc=f"rxmesh_no_such_role@{parsed.hostname}:5432"))
    line = one_line_exit_2(["drill", "--dsn", unknown], capsys)
    assert "rxmesh_no_such_role" in line


async def test_negative_control_a_failure_after_the_drill_began_is_not_a_setup_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*_: object) -> None:
        raise RuntimeError("a defect inside the drill")

    monkeypatch.setattr(runner, "_script", broken)
    with pytest.raises(RuntimeError, match="a defect inside the drill") as raised:
        await asyncio.wait_for(run_drill(), 30)
    assert not isinstance(raised.value, DrillSetupError)


async def test_the_embedded_drill_names_no_address_and_the_segment_it_journaled_in() -> None:
    out = io.StringIO()
    result = await asyncio.wait_for(run_drill(out=out), 30)
    assert result.exit_status == 0
    text = out.getvalue()
    assert "127.0.0.1" not in text and "5432" not in text
    assert "journaled in segment-" in text
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    assert '"journaled in segment-000000000001.log"' in quickstart
    assert "journaled as a file" not in quickstart
