"""Hostile input: whatever arrives, the answer is a clear refusal naming it, never UNKNOWN.

Hypothesis generates paths, node types and contents (unicode, control characters, NUL, lone
surrogates, "..", very long, deeply nested JSON, SQL fragments) and sends them to
``mesh.create_node`` (as a dict and as JSON text) and ``mesh.create_nodes``. Each answer is
success or INVALID_PATH / VALIDATION_FAILED / INVALID_NODE_TYPE / NODE_ALREADY_EXISTS naming the
input; never UNKNOWN, never an exception, and a refused request changes no row. The in-memory store
takes the many examples; PostgreSQL takes a smaller set, plus the partition-name injection checks.

The journal's own refusals (checksum, unsafe directory) are tested at ledger level in
tests/ledger/ (test_journal_directory.py, test_journal_restart.py); here they are driven through
the Mesh, which is what a deployment touches.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import JournalError, PendingWriteLedger
from rxmesh.model import NodeQuery
from rxmesh.operations import (
    CreateNodeRequest,
    RejectionReason,
)
from rxmesh.providers.memory import InMemoryStore
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultInjectingStore
from tests.conftest import PG_DSN, LogRecords, require_server

ALICE = {"user": "alice"}
REFUSALS = {
    RejectionReason.INVALID_PATH,
    RejectionReason.VALIDATION_FAILED,
    RejectionReason.INVALID_NODE_TYPE,
    RejectionReason.NODE_ALREADY_EXISTS,
}
SQL = [
    "a';DROP TABLE nodes;--",
    'a";DROP SCHEMA x;--',
    "1 OR 1=1",
    "$$; SELECT pg_sleep(10); $$",
    "p/x' UNION SELECT * FROM pg_shadow--",
    "\\x00",
]
ODD_PATHS = [
    "..", ".", "a/..", "a/../b", "a/./b", "", "/", "a//b", "a/", "/a", "a\x00b", "a\nb", "a\tb",
    "é/ü", "🙂/x", "a b/c", "\u202ep/x", "_system/x", "p/_access/alice", "x" * 5000,
    "/".join(["a"] * 300), "p/" + "y" * 70, "A.b-c_1/n", "p/n", "p/existing", *SQL,
]


def _text(max_size: int) -> st.SearchStrategy[str]:
    # Every code point, lone surrogates and NUL included: paths refuse them all, and content and
    # node types that a store cannot hold are refused up front (they were defects, now fixed).
    return st.text(st.characters(codec=None, exclude_categories=()), max_size=max_size)


paths = st.one_of(
    st.sampled_from(ODD_PATHS),
    _text(40),
    st.lists(st.one_of(_text(12), st.sampled_from(["..", ".", "p", "_x", ""])), max_size=6).map(
        "/".join
    ),
    st.builds(lambda tail: "p/" + tail, _text(20)),
)
node_types = st.one_of(st.none(), _text(30), st.sampled_from([*SQL, "x" * 20000]))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    _text(30), st.sampled_from(SQL),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(_text(8), inner, max_size=4),
    max_leaves=25,
)


class Deep:
    """Content nested ``depth`` levels deep, built late (so Hypothesis can print the example)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"

    def build(self) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(self.depth):
            value = {"a": value}
        return value


def _real(content: Any) -> Any:
    return content.build() if isinstance(content, Deep) else content


contents = st.one_of(
    st.none(),
    st.dictionaries(_text(10), json_values, max_size=5),
    st.integers(min_value=1, max_value=3000).map(Deep),
    st.just({"big": "z" * 1_100_000}),
    json_values,  # not a mapping at all
)


def _dumps(request: dict[str, Any]) -> str:
    """JSON text of ``request`` (deep nesting written by hand: json.dumps would recurse)."""
    content = request["node"].get("content")
    if isinstance(content, Deep):
        node = dict(request["node"], content="@@")
        text = json.dumps(dict(request, node=node))
        return text.replace('"@@"', '{"a":' * content.depth + "{}" + "}" * content.depth)
    return json.dumps(request)


async def _rows(store: Any, prefix: str = "") -> dict[str, Any]:
    frame = await first_value(store.query(NodeQuery(path_prefix=prefix)), timeout=10.0)
    return {n.path: (n.node_type, n.content, n.version, n.request_id) for n in frame.nodes}


def _check_answer(answer: Any, path: object, *, bulk: bool = False) -> None:
    assert answer.rejection_reason is not RejectionReason.UNKNOWN, answer.error
    if answer.success:
        return
    assert answer.rejection_reason in REFUSALS, (answer.rejection_reason, answer.error)
    error = answer.error or ""
    assert error, "a refusal without a message"
    if answer.rejection_reason is RejectionReason.INVALID_PATH:
        assert "path" in error, error
    elif answer.rejection_reason is RejectionReason.VALIDATION_FAILED:
        named = ("content", "node_type", "node", "JSON", "neither", "bytes", "path")
        assert any(word in error for word in named), error


DEEP_JSON_RAISES = (
    "rxmesh/mesh/_mesh.py:133 _request_id_of() calls json.loads(request) on a request that "
    "pydantic already refused and catches only ValueError: JSON text nested ~1000+ levels deep "
    "makes json.loads raise RecursionError, which escapes create_node()/create_nodes()/"
    "update_node()/... synchronously (no answer at all). Fix: catch (ValueError, RecursionError) "
    "there (or take the request_id from pydantic's error input instead of re-parsing)."
)
async def _one_create(
    mesh: Mesh, store: Any, path: str, node_type: str | None, content: Any, as_json: bool
) -> None:
    request = {"node": {"path": path, "node_type": node_type, "content": content}, "access": ALICE}
    before = await _rows(store)
    if as_json:
        sent: Any = _dumps(request)
    else:
        sent = dict(request, node=dict(request["node"], content=_real(content)))
    answer = await first_value(mesh.create_node(sent), timeout=10.0)
    _check_answer(answer, path)
    after = await _rows(store)
    if not answer.success:
        assert after == before, "a refused create changed the store"
    else:
        assert answer.node is not None
        assert {p: v for p, v in after.items() if p in before} == before  # nothing overwritten
        assert after[answer.node.path][1] == answer.node.content


async def _one_bulk(mesh: Mesh, store: Any, entries: list[tuple[str, str | None, Any]]) -> None:
    request = {
        "nodes": [{"path": p, "node_type": t, "content": _real(c)} for p, t, c in entries],
        "access": ALICE,
    }
    before = await _rows(store)
    answer = await first_value(mesh.create_nodes(request), timeout=10.0)
    _check_answer(answer, entries[0][0], bulk=True)
    after = await _rows(store)
    assert {p: v for p, v in after.items() if p in before} == before
    if not answer.success:
        assert after == before, "a refused bulk create changed the store"


def _memory_mesh() -> tuple[Mesh, InMemoryStore]:
    store = InMemoryStore()
    mesh = Mesh(store, retry_delays=(0.001,), ledger=PendingWriteLedger(journal_dir=None))
    asyncio.get_event_loop()
    return mesh, store


async def _seeded_memory() -> tuple[Mesh, InMemoryStore]:
    mesh, store = _memory_mesh()
    await mesh.create(MeshNode(path="p/existing", content={"v": 0}), access=AccessContext(**ALICE))
    return mesh, store


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=paths, node_type=node_types, content=contents, as_json=st.booleans())
def test_a_hostile_create_is_refused_clearly_or_created_never_unknown(
    path: str, node_type: str | None, content: Any, as_json: bool
) -> None:
    async def run() -> None:
        mesh, store = await _seeded_memory()
        await _one_create(mesh, store, path, node_type, content, as_json)

    asyncio.run(run())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(st.tuples(paths, node_types, contents), min_size=1, max_size=4),
)
def test_a_hostile_bulk_create_is_refused_clearly_or_created_never_unknown(
    entries: list[tuple[str, str | None, Any]],
) -> None:
    async def run() -> None:
        mesh, store = await _seeded_memory()
        await _one_bulk(mesh, store, entries)

    asyncio.run(run())


async def test_a_json_request_nested_two_thousand_deep_is_refused_not_raised() -> None:
    mesh, _ = _memory_mesh()
    request = {"node": {"path": "p/deep", "content": Deep(2000)}, "access": ALICE}
    answer = await first_value(mesh.create_node(_dumps(request)), timeout=5.0)
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED


async def test_a_json_request_nested_five_hundred_deep_is_refused_validation_failed() -> None:
    """The control below the defect's depth: refused clearly, naming the JSON."""
    mesh, _ = _memory_mesh()
    request = {"node": {"path": "p/deep", "content": Deep(500)}, "access": ALICE}
    answer = await first_value(mesh.create_node(_dumps(request)), timeout=5.0)
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "JSON" in (answer.error or "")


UNSTORABLE_TEXT = (
    "rxmesh/mesh/_mesh.py Mesh._fail_fast (and MeshNode's validation) accepts content and node "
    "types PostgreSQL cannot store, so they reach SQL and come back UNKNOWN 'Unexpected error' "
    "(and the in-memory store accepts what PostgreSQL refuses: the two stores' contracts differ): "
    "NUL in a content string or key -> UntranslatableCharacterError 22P05; NUL in node_type -> "
    "CharacterNotInRepertoireError 22021; a lone surrogate in content -> UnicodeEncodeError in "
    "_fail_fast's own json.dumps(...).encode() (UNKNOWN on BOTH stores); a lone surrogate in "
    "node_type -> asyncpg DataError; Infinity/NaN in content -> InvalidTextRepresentationError "
    "(json). Fix in _fail_fast: json.dumps(content, ensure_ascii=False, allow_nan=False) and "
    ".encode() inside try/except (ValueError, UnicodeEncodeError) -> NodeValidationError naming "
    "the node; walk content keys/strings and node_type for '\\x00' and lone surrogates "
    "(0xD800-0xDFFF) -> NodeValidationError (VALIDATION_FAILED) naming the field."
)
UNSTORABLE = {
    "NUL in a content string": {"content": {"s": "a\x00b"}},
    "NUL in a content key": {"content": {"a\x00": 1}},
    "NUL in node_type": {"node_type": "T\x00", "content": {}},
    "lone surrogate in content": {"content": {"s": "\ud800"}},
    "lone surrogate in node_type": {"node_type": "\udfff", "content": {}},
    "Infinity in content": {"content": {"f": float("inf")}},
    "NaN in content": {"content": {"f": float("nan")}},
}


async def test_a_lone_surrogate_in_content_is_refused_not_unknown_even_in_memory() -> None:
    mesh, store = _memory_mesh()
    request = {"node": {"path": "p/s", **UNSTORABLE["lone surrogate in content"]}, "access": ALICE}
    answer = await first_value(mesh.create_node(request), timeout=5.0)
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error


@pytest.mark.postgres
@pytest.mark.parametrize("case", sorted(UNSTORABLE))
async def test_content_postgres_cannot_store_is_refused_up_front(
    case: str, pg_prefix: str
) -> None:
    mesh, store = await _pg_mesh(pg_prefix)
    try:
        request = {"node": {"path": f"p/u{uuid.uuid4().hex[:6]}", **UNSTORABLE[case]},
                   "access": ALICE}
        answer = await first_value(mesh.create_node(request), timeout=10.0)
    finally:
        mesh.dispose()
        await store.close()
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error


# -- against PostgreSQL -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_prefix() -> Iterator[str]:
    require_server(PG_DSN, 5432, "PostgreSQL")
    prefix = f"rxh{uuid.uuid4().hex[:8]}_"
    yield prefix

    async def drop() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=5.0)
        try:
            for row in await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
            ):
                await conn.execute(f"DROP SCHEMA {quote_identifier(row[0])} CASCADE")
        finally:
            await conn.close()

    asyncio.run(drop())


async def _pg_mesh(prefix: str) -> tuple[Mesh, PostgresStore]:
    store = PostgresStore(PG_DSN, schema_prefix=prefix, max_size=2)
    await store.start()
    mesh = Mesh(store, retry_delays=(0.01,), ledger=PendingWriteLedger(journal_dir=None))
    return mesh, store


valid_or_hostile_paths = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(lambda n: f"p/h{n}"), paths
)


@pytest.mark.postgres
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=valid_or_hostile_paths, node_type=node_types, content=contents, as_json=st.booleans())
def test_a_hostile_create_against_postgres_is_never_unknown(
    pg_prefix: str, path: str, node_type: str | None, content: Any, as_json: bool
) -> None:
    async def run() -> None:
        mesh, store = await _pg_mesh(pg_prefix)
        try:
            await _one_create(mesh, store, path, node_type, content, as_json)
        finally:
            mesh.dispose()
            await store.close()

    asyncio.run(run())


@pytest.mark.postgres
@pytest.mark.parametrize(
    "partition",
    ['a";DROP SCHEMA x;--', "a'; DROP SCHEMA x;--", 'x"."nodes', "a b", "a;b", "ä", "a\x00"],
)
async def test_a_partition_that_tries_sql_injection_is_refused_by_the_path_rules(
    partition: str, pg_dsn: str, log_records: LogRecords
) -> None:
    prefix = f"rxh{uuid.uuid4().hex[:8]}_"
    mesh, store = await _pg_mesh(prefix)
    canary = f"{prefix}canary"
    admin = await asyncpg.connect(pg_dsn, timeout=5.0)
    try:
        await admin.execute(f"CREATE SCHEMA {quote_identifier(canary)}")
        answer = await first_value(
            mesh.create_node(
                CreateNodeRequest(
                    node=MeshNode.model_construct(path=f"{partition}/n", content={}),
                    access=AccessContext(**ALICE),
                )
            ),
            timeout=10.0,
        )
        schemas = {
            r[0]
            for r in await admin.fetch(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
            )
        }
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(canary)} CASCADE")
        await admin.close()
        mesh.dispose()
        await store.close()
    assert answer.rejection_reason is RejectionReason.INVALID_PATH, answer.error
    assert repr(partition)[1:-1][:20] in (answer.error or "") or "path" in (answer.error or "")
    assert schemas == {canary}  # nothing was created, nothing was dropped


@pytest.mark.postgres
async def test_a_valid_but_odd_partition_name_gets_a_correctly_quoted_schema(pg_dsn: str) -> None:
    prefix = f"rxh{uuid.uuid4().hex[:8]}_"
    mesh, store = await _pg_mesh(prefix)
    admin = await asyncpg.connect(pg_dsn, timeout=5.0)
    try:
        created = await mesh.create(
            MeshNode(path="A.b-c_1/n", content={"ok": True}), access=AccessContext(**ALICE)
        )
        schemas = {
            r[0]
            for r in await admin.fetch(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
            )
        }
        row = await admin.fetchrow(
            f"SELECT path, content::text FROM {quote_identifier(prefix + 'A.b-c_1')}.nodes"
            " WHERE path = 'A.b-c_1/n'"
        )
    finally:
        for schema in await admin.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
        ):
            await admin.execute(f"DROP SCHEMA {quote_identifier(schema[0])} CASCADE")
        await admin.close()
        mesh.dispose()
        await store.close()
    assert created.path == "A.b-c_1/n"
    assert schemas == {prefix + "A.b-c_1"}  # case and punctuation kept: quoted, not folded
    assert row is not None
    assert json.loads(row["content"]) == {"ok": True}


# -- the journal, through the Mesh ------------------------------------------------------------


async def test_a_journal_file_that_fails_its_checksum_is_quarantined_and_never_reissued(
    tmp_path: Path, log_records: LogRecords
) -> None:
    journal = tmp_path / "journal"
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_writes_as_unreachable()
    mesh = Mesh(store, retry_delays=(0.001,), ledger=PendingWriteLedger(journal))
    for name in ("torn", "edited", "intact"):
        answer = await first_value(
            mesh.create_node(
                CreateNodeRequest(
                    node=MeshNode(path=f"p/{name}", content={"v": 1}),
                    access=AccessContext(**ALICE),
                )
            ),
            timeout=5.0,
        )
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    torn = mesh.ledger.journal_file("p/torn")
    edited = mesh.ledger.journal_file("p/edited")
    assert torn is not None and edited is not None
    mesh.dispose()
    torn.write_bytes(torn.read_bytes()[: len(torn.read_bytes()) // 2])
    edited.write_bytes(edited.read_bytes().replace(b'"v":1', b'"v":2'))

    store.restore()
    store.clear_log()
    ledger = PendingWriteLedger(journal)  # "the process starts again"
    restarted = Mesh(store, retry_delays=(0.001,), ledger=ledger)
    settled = asyncio.Event()
    watching = ledger.outcomes.subscribe(lambda outcome: settled.set())
    try:
        assert ledger.statistics().quarantined == 2
        assert [i.path for i in ledger.pending()] == ["p/intact"]
        store.declare_gap("back")
        async with asyncio.timeout(5.0):
            await settled.wait()
    finally:
        watching.dispose()
        restarted.dispose()
    assert not ledger.pending()
    assert not ledger.in_flight()
    written = {op.target for op in store.writes_attempted()}
    assert "p/intact" in written
    assert not {"p/torn", "p/edited"} & written  # never re-issued
    corrupt = sorted(p.name for p in journal.iterdir() if p.name.endswith(".corrupt"))
    assert len(corrupt) == 2
    assert sum(1 for r in log_records.at("ERROR") if "corrupt" in str(r["message"]).lower() or
               "quarantin" in str(r["message"]).lower()) >= 2


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o722])
def test_a_mesh_refuses_to_start_on_a_journal_directory_others_can_write(
    tmp_path: Path, mode: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    journal.chmod(mode)
    with pytest.raises(JournalError, match="journal"):
        Mesh(InMemoryStore(), ledger=PendingWriteLedger(journal))
    monkeypatch.setenv("RXMESH_PENDING_WRITES_DIR", str(journal))
    with pytest.raises(JournalError, match="journal"):
        Mesh(InMemoryStore())  # the default ledger reads the variable


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_mesh_refuses_a_journal_directory_owned_by_another_user(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir(mode=0o700)
    os.chown(journal, 65534, 65534)  # nobody
    with pytest.raises(JournalError):
        Mesh(InMemoryStore(), ledger=PendingWriteLedger(journal))


def test_a_private_journal_directory_is_accepted() -> None:
    """The negative control for the refusals above."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        journal = Path(scratch) / "journal"
        mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(journal))
        assert mesh.ledger.journal_dir == journal
        mesh.dispose()
