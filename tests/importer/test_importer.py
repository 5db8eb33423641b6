"""`rxmesh import`: 10,000 nodes in windows, idempotent re-runs, bad files named with their line."""

from __future__ import annotations

import asyncio
import io
import json
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable

from rxmesh import cli
from rxmesh.importer import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Progress,
    import_directory,
    read_directory,
)
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh import Mesh
from rxmesh.model import MeshNode
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore


def _write_nodes(directory: Path, count: int, *, files: int = 10) -> None:
    """``count`` nodes: JSON-lines files, plus one .json list and one .json object."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = (count - 3) // files
    written = 0
    for f in range(files):
        size = per_file if f < files - 1 else count - 3 - written
        lines = [
            json.dumps({"path": f"f{f}/n{i}", "node_type": "Item", "content": {"i": i}})
            for i in range(size)
        ]
        (directory / f"part{f:02d}.jsonl").write_text("\n".join(lines) + "\n")
        written += size
    sub = directory / "more"
    sub.mkdir()
    (sub / "list.json").write_text(
        json.dumps([{"path": "extra/a", "content": 1}, {"path": "extra/b", "node_type": "X"}])
    )
    (sub / "one.json").write_text(json.dumps({"path": "extra/c", "content": {"k": "v"}}))
    (sub / "notes.txt").write_text("not imported: only .json and .jsonl are read")


@pytest.fixture
def ten_thousand(tmp_path: Path) -> Path:
    directory = tmp_path / "nodes"
    _write_nodes(directory, 10_000)
    return directory


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    directory = tmp_path / "broken"
    directory.mkdir()
    (directory / "good.jsonl").write_text(
        "\n".join(json.dumps({"path": f"good/n{i}", "content": i}) for i in range(5)) + "\n"
    )
    (directory / "bad.json").write_text('{"path": "x",\n  "content": 1,,\n}')
    (directory / "list.json").write_text(
        "[\n"
        '  {"path": "list/ok", "content": 1},\n'
        '  {"path": "list//empty", "content": 2},\n'
        '  {"path": "list/typed", "node_type": 5}\n'
        "]\n"
    )
    (directory / "lines.jsonl").write_text(
        '{"path": "lines/ok", "content": 1}\n'
        "not json\n"
        '{"path": "lines/extra", "colour": "red"}\n'
        "\n"
        '{"path": "good/n1", "content": 1}\n'
        "[1, 2]\n"
        '{"path": "lines/none"}\n'
        '{"path": "_system/x", "content": 1}\n'
    )
    return directory


async def test_ten_thousand_nodes_import_and_a_second_run_creates_nothing(
    ten_thousand: Path,
) -> None:
    mesh = Mesh(InMemoryStore())
    first = await import_directory(ten_thousand, mesh, partition="bulk", window=1000)
    assert (first.created, first.already_present, first.refused) == (10_000, 0, [])
    assert first.files == 12 and first.exit_status == EXIT_OK
    second = await import_directory(ten_thousand, mesh, partition="bulk", window=1000)
    assert (second.created, second.already_present) == (0, 10_000)
    assert second.exit_status == EXIT_OK
    assert "created           0\n  already present   10000" in second.format()
    mesh.dispose()


def test_the_cli_imports_into_memory(
    ten_thousand: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["import", str(ten_thousand), "--dsn", "memory://", "--partition", "p"])
    out = capsys.readouterr()
    assert status == EXIT_OK
    assert "created           10000" in out.out
    assert "\r[" not in out.err  # stderr is not a TTY under pytest: no progress bar


def test_broken_files_are_reported_with_file_line_and_reason(
    broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["import", str(broken), "--dsn", "memory://", "--no-progress"])
    out = capsys.readouterr().out
    assert status == EXIT_REFUSED
    for line in (
        "bad.json:2: invalid JSON: Expecting property name enclosed in double quotes",
        "list.json:3: path 'list//empty' has an empty segment",
        "list.json:4: 'node_type' must be a string, got int",
        "lines.jsonl:2: invalid JSON: Expecting value",
        "lines.jsonl:3: unknown key(s) 'colour'",
        "lines.jsonl:5: duplicate path 'good/n1' (first at good.jsonl:2)",
        "lines.jsonl:6: expected a node object, got list",
        "lines.jsonl:7: node 'lines/none' has neither a node_type nor content",
        "lines.jsonl:8: path '_system/x': segment '_system' is reserved for system records",
    ):
        assert line in out, line
    assert "created           7" in out  # good/n0-4, list/ok, lines/ok
    assert "refused           9" in out


def test_reading_a_directory_keeps_file_order_and_lines(broken: Path) -> None:
    items, problems, files = read_directory(broken)
    assert files == 4
    assert [(i.file, i.line, i.node.path) for i in items if i.file == "list.json"] == [
        ("list.json", 2, "list/ok")
    ]
    assert all(p.file and p.reason for p in problems)


async def test_an_unreachable_store_answers_unavailable_journals_and_stops(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "nodes"
    directory.mkdir()
    (directory / "n.jsonl").write_text(
        "\n".join(json.dumps({"path": f"n{i}", "content": i}) for i in range(10)) + "\n"
    )
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_writes_as_unreachable()
    mesh = Mesh(store, ledger=PendingWriteLedger(tmp_path / "journal"), retry_delays=())
    report = await import_directory(directory, mesh, partition="p", window=4)
    assert report.created == 0
    assert len(report.unavailable) == 4  # the first window; nothing was written
    assert len(report.not_attempted) == 6  # the rest waits for a re-run
    assert report.exit_status == EXIT_UNAVAILABLE
    assert len(mesh.ledger.pending()) == 4  # journaled for one re-issue
    assert "journaled for one re-issue in" in report.format()
    # one write met the store (the partition's first system record) and was refused; the other
    # windows were never attempted
    assert [(op.op, op.outcome) for op in store.writes_attempted()] == [("write", "refused")]
    mesh.dispose()


async def test_a_reachable_store_is_not_reported_unavailable(tmp_path: Path) -> None:
    """Negative control of the test above: the same import on a healthy store."""
    directory = tmp_path / "nodes"
    directory.mkdir()
    (directory / "n.jsonl").write_text(
        "\n".join(json.dumps({"path": f"n{i}", "content": i}) for i in range(10)) + "\n"
    )
    mesh = Mesh(FaultInjectingStore(InMemoryStore()), retry_delays=())
    report = await import_directory(directory, mesh, partition="p", window=4)
    assert (report.created, report.unavailable, report.not_attempted) == (10, [], [])
    mesh.dispose()


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["import", str(tmp_path / "missing"), "--dsn", "memory://"]) == EXIT_USAGE
    assert cli.main(["import", str(tmp_path), "--dsn", "memory://", "--partition", "a/b"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["import", str(tmp_path)])  # --dsn is required


def test_the_progress_bar_shows_items_rate_and_eta_and_is_off_when_not_a_tty() -> None:
    stream = io.StringIO()
    bar = Progress(100, stream=stream, enabled=True)
    bar.update(100)
    bar.finish()
    text = stream.getvalue()
    assert text.startswith("\r[##############################] 100/100 items")
    assert "/s  ETA 0s" in text and text.endswith("\n")
    quiet = io.StringIO()  # StringIO is not a TTY: the default is off
    off = Progress(100, stream=quiet)
    off.update(50)
    off.finish()
    assert quiet.getvalue() == ""


@pytest.fixture
def pg_partition(pg_dsn: str) -> Iterator[str]:
    partition = f"imp{secrets.token_hex(4)}"
    yield partition

    async def drop() -> None:
        import asyncpg

        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "rxmesh_{partition}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.mark.postgres
def test_ten_thousand_nodes_import_into_postgres_twice(
    ten_thousand: Path, pg_dsn: str, pg_partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["import", str(ten_thousand), "--dsn", pg_dsn, "--partition", pg_partition]
    assert cli.main([*args, "--window", "2000"]) == EXIT_OK
    assert "created           10000\n  already present   0" in capsys.readouterr().out
    assert cli.main(args) == EXIT_OK
    assert "created           0\n  already present   10000" in capsys.readouterr().out


@pytest.mark.postgres
def test_an_import_through_a_pooler_needs_listen_dsn_and_then_imports(
    tmp_path: Path,
    pg_dsn: str,
    pgbouncer_dsn: str,
    pg_partition: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through a transaction pooler the change feed cannot LISTEN: without --listen-dsn the
    import refuses to start (exit 2, saying why and the fix, nothing written); with the server
    itself as --listen-dsn it imports."""
    lines = (json.dumps({"path": f"n{i}", "node_type": "Doc", "content": {}}) for i in range(5))
    (tmp_path / "nodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    base = ["import", str(tmp_path), "--dsn", pgbouncer_dsn, "--partition", pg_partition]
    assert cli.main([*base, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--listen-dsn" in err
    assert "nothing was written" in err
    assert cli.main([*base, "--no-progress", "--listen-dsn", pg_dsn]) == EXIT_OK
    assert "created           5\n" in capsys.readouterr().out


def test_a_partial_landing_is_reported_with_its_details_and_exit_3() -> None:
    from rxmesh.importer import ImportItem, ImportReport, _settle
    from rxmesh.model import MeshNode
    from rxmesh.operations import CreateNodesResponse, RejectionReason

    batch = [ImportItem(MeshNode(path=f"p/n{i}", content=i), "a.jsonl", i + 1) for i in range(4)]
    response = CreateNodesResponse(
        request_id="r",
        success=False,
        created=(batch[0].node, batch[1].node),
        already_present=("p/n2",),
        not_created=(batch[3].node,),
        rejection_reason=RejectionReason.UNKNOWN,
        error="Bulk creation of 4 node(s) partially landed: 2 created, 1 not created",
    )
    report = ImportReport(store="memory")
    _settle(report, batch, response, 1)
    assert (report.created, report.already_present) == (2, 1)
    assert report.unavailable == ["p/n3"]
    assert report.partial == [
        "batch 1: 2 landed, 1 not created (UNKNOWN): Bulk creation of 4 node(s) partially "
        "landed: 2 created, 1 not created"
    ]
    assert report.exit_status == EXIT_UNAVAILABLE
    assert "partial landings  1\n    batch 1: 2 landed" in report.format()


def test_a_judged_batch_refusal_names_every_entry_with_its_file_and_line() -> None:
    from rxmesh.importer import ImportItem, ImportReport, _settle
    from rxmesh.model import MeshNode
    from rxmesh.operations import CreateNodesResponse, RejectionReason

    batch = [ImportItem(MeshNode(path=f"p/n{i}", content=i), "a.jsonl", i + 1) for i in range(2)]
    response = CreateNodesResponse(
        request_id="r",
        success=False,
        rejection_reason=RejectionReason.FORBIDDEN,
        error="'bob' holds no grant to create in partition 'p'",
    )
    report = ImportReport(store="memory")
    _settle(report, batch, response, 1)
    assert [str(p) for p in report.refused] == [
        "a.jsonl:1: FORBIDDEN: 'bob' holds no grant to create in partition 'p'",
        "a.jsonl:2: FORBIDDEN: 'bob' holds no grant to create in partition 'p'",
    ]
    assert report.exit_status == EXIT_REFUSED


def test_an_import_user_that_is_not_a_user_id_is_refused_by_the_command_line() -> None:
    """FAILS against the old importer: a pydantic ValidationError traceback, not a usage error."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "rxmesh", "import", ".", "--dsn", "memory://", "--user", "a@b"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "argument --user: 'a@b' is not a user id" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------- streaming


class _TruncatingStore(InMemoryStore):
    """Cuts the input file down to its first ``keep`` bytes when the first window is written."""

    def __init__(self, file: Path, keep: int) -> None:
        super().__init__()
        self.file, self.keep, self.windows = file, keep, 0

    def write_many(self, nodes: Sequence[MeshNode], window: int = 1000) -> Observable[Any]:
        self.windows += 1
        if self.windows == 1:
            with self.file.open("r+b") as handle:
                handle.truncate(self.keep)
        return super().write_many(nodes, window)


async def test_the_import_reads_a_window_at_a_time_not_the_whole_input_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAILS against the old importer, which read (and held) every node before the first write:
    here the file loses all but its first lines once the first window is written, and only what
    was read by then (the first window and the block the reader held) is imported."""
    from rxmesh.importer import _json as _import_json

    monkeypatch.setattr(_import_json, "_BLOCK", 4096)  # 256 KiB in use: a smaller file will do
    file = tmp_path / "nodes.jsonl"
    lines = [json.dumps({"path": f"n{i:05d}", "content": {"i": i}}) + "\n" for i in range(5000)]
    file.write_text("".join(lines))
    store = _TruncatingStore(file, keep=len("".join(lines[:3])))  # at a line's end
    mesh = Mesh(store, retry_delays=())
    report = await import_directory(tmp_path, mesh, partition="p", window=10)
    mesh.dispose()
    assert 10 <= report.created < 1000  # the rest was never read
    assert report.items == report.created + len(report.refused)
    assert len(report.refused) <= 1  # the line the cut went through, read half from the block
    assert store.windows == report.created // 10 + (report.created % 10 > 0)


async def test_the_same_import_without_the_cut_reads_everything(tmp_path: Path) -> None:
    """Negative control of the test above: the untouched file imports whole."""
    file = tmp_path / "nodes.jsonl"
    file.write_text(
        "".join(json.dumps({"path": f"n{i:05d}", "content": {"i": i}}) + "\n" for i in range(5000))
    )
    mesh = Mesh(InMemoryStore(), retry_delays=())
    report = await import_directory(tmp_path, mesh, partition="p", window=10)
    mesh.dispose()
    assert (report.created, report.items, report.exit_status) == (5000, 5000, EXIT_OK)


# ---------------------------------------------------------------------------------- validation


def test_content_the_mesh_refuses_is_named_with_its_line_and_the_rest_of_its_window_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FAILS against the old importer: content a store cannot keep (a NUL character) passed the
    importer's checks, the mesh refused the whole window naming its first bad entry, and every
    entry of the window was reported refused with that one reason."""
    lines = [json.dumps({"path": f"n{i}", "content": {"s": "ok"}}) for i in range(5)]
    lines[2] = json.dumps({"path": "n2", "content": {"s": "a\u0000b"}})
    lines[4] = json.dumps({"path": "n4", "node_type": "9-not-a-type"})
    (tmp_path / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    status = cli.main(["import", str(tmp_path), "--dsn", "memory://", "--partition", "p"])
    out = capsys.readouterr().out
    assert status == EXIT_REFUSED
    assert "nodes.jsonl:3: node 'p/n2': content.s contains a NUL character" in out
    assert "nodes.jsonl:5: node_type: String should match pattern" in out
    assert "created           3" in out
    assert "refused           2" in out


def test_a_window_of_good_entries_is_written_without_a_second_check(tmp_path: Path) -> None:
    """Negative control of the test above: no entry is checked alone when the mesh accepts."""
    from unittest import mock

    from rxmesh.importer import _read as _import_read

    lines = [json.dumps({"path": f"n{i}", "content": {"s": "ok"}}) for i in range(5)]
    (tmp_path / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    with mock.patch.object(_import_read, "check_node", wraps=_import_read.check_node) as check:
        mesh = Mesh(InMemoryStore(), retry_delays=())
        report = asyncio.run(import_directory(tmp_path, mesh, partition="p"))
        mesh.dispose()
    assert report.created == 5
    assert check.call_count == 0


def test_a_line_nested_too_deeply_is_refused_with_its_line_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FAILS against the old importer: ``json.loads`` raised RecursionError, which escaped the
    reader and ended the import with a traceback."""
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps({"path": "a", "content": 1}) + "\n" + deep + "\n"
    (tmp_path / "nodes.jsonl").write_text(text + json.dumps({"path": "b", "content": 2}) + "\n")
    args = ["import", str(tmp_path), "--dsn", "memory://", "--partition", "p", "--no-progress"]
    status = cli.main(args)
    out = capsys.readouterr().out
    assert status == EXIT_REFUSED
    assert "nodes.jsonl:2: invalid JSON: nested too deeply to read" in out
    assert "created           2" in out


def test_a_path_the_shortcut_does_not_know_is_judged_by_the_path_rule(tmp_path: Path) -> None:
    """Negative control of the shortcut's property (tests/model/test_rules.py): '.hidden' misses
    the shortcut but obeys the rule, so it is imported; '_x' is refused by the rule itself."""
    lines = [
        json.dumps({"path": "a/.hidden", "content": 1}),
        json.dumps({"path": "_x", "content": 1}),
    ]
    (tmp_path / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    items, problems, _ = read_directory(tmp_path, partition="p")
    assert [item.node.path for item in items] == ["p/a/.hidden"]
    assert [str(problem) for problem in problems] == [
        "nodes.jsonl:2: path 'p/_x': segment '_x' is reserved for system records"
    ]


async def test_a_store_lost_mid_import_stops_sending_and_accounts_for_every_entry(
    tmp_path: Path,
) -> None:
    """Once a window is answered UNAVAILABLE nothing more is sent; a window already in flight
    is answered on its own (here: UNAVAILABLE too, journaled), the rest is not attempted."""
    (tmp_path / "n.jsonl").write_text(
        "\n".join(json.dumps({"path": f"n{i:02d}", "content": i}) for i in range(20)) + "\n"
    )
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, ledger=PendingWriteLedger(tmp_path / "journal"), retry_delays=())
    cut = mesh.created.subscribe(lambda _node: store.refuse_writes_as_unreachable())
    report = await import_directory(tmp_path, mesh, partition="p", window=4)
    cut.dispose()
    assert report.created == 4
    assert len(report.unavailable) in (4, 8)  # the window that met the outage, and one in flight
    assert report.not_attempted
    assert report.created + len(report.unavailable) + len(report.not_attempted) == 20
    assert sorted(report.unavailable + report.not_attempted) == [
        f"p/n{i:02d}" for i in range(4, 20)
    ]
    assert len(mesh.ledger.pending()) == len(report.unavailable)
    assert report.exit_status == EXIT_UNAVAILABLE
    mesh.dispose()


def test_an_entry_with_a_bad_node_type_is_refused_as_read_and_leaves_its_path_free(
    tmp_path: Path,
) -> None:
    """A node type the model refuses is refused where it is read (as a bad path is), so a later
    entry for the same path is not a duplicate of it; a trailing newline is refused too."""
    lines = [
        json.dumps({"path": "a", "node_type": "9-not-a-type"}),
        json.dumps({"path": "b", "node_type": "Ab\n"}),
        json.dumps({"path": "a", "node_type": "Fine"}),
    ]
    (tmp_path / "nodes.jsonl").write_text("\n".join(lines) + "\n")
    items, problems, _ = read_directory(tmp_path, partition="p")
    assert [(item.line, item.node.path) for item in items] == [(3, "p/a")]
    assert [(problem.line, problem.reason.split(":")[0]) for problem in problems] == [
        (1, "node_type"),
        (2, "node_type"),
    ]


def test_json_lines_may_end_with_lf_crlf_or_a_lone_cr_and_keep_their_numbers(
    tmp_path: Path,
) -> None:
    """Line numbers count every line ending a text editor shows (LF, CRLF, a lone CR); a JSON
    string may hold U+2028, which ends no line."""
    text = (
        '{"path": "a", "content": 1}\r\n'
        '{"path": "b", "content": 2}\r'
        "\r\n"
        '{"path": "c", "content": "x\u2028y"}\n'
        "not json\n"
    )
    (tmp_path / "n.jsonl").write_bytes(text.encode())
    items, problems, _ = read_directory(tmp_path, partition="p")
    assert [(item.line, item.node.path) for item in items] == [(1, "p/a"), (2, "p/b"), (4, "p/c")]
    assert [item.node.content for item in items][2] == "x\u2028y"
    assert [(problem.line, problem.reason.split(":")[0]) for problem in problems] == [
        (5, "invalid JSON")
    ]
