"""Hostile input: whatever arrives, the answer is a clear refusal naming it, never UNKNOWN.

Hypothesis generates paths, node types and contents (unicode, control characters, NUL, lone
surrogates, "..", very long, deeply nested JSON, SQL fragments) and sends them to
``mesh.create_node`` (as a dict and as JSON text) and ``mesh.create_nodes``. Each answer is
success or INVALID_PATH / VALIDATION_FAILED / INVALID_NODE_TYPE / NODE_ALREADY_EXISTS naming the
input; never UNKNOWN, never an exception, and a refused request changes no row. The in-memory store
takes the many examples; PostgreSQL takes a smaller set, plus the partition-name injection checks.

Every field of every verb (issue 13): a hostile string in ONE field (request_id, access.user,
access.on_behalf_of, node.created_by, node.request_id, node_type, a path, a content key or value)
of create_node, create_nodes, update_node, delete_node or move_node, sent as a model, a mapping or
JSON text, is answered exactly once, never UNKNOWN, never raised; refused exactly when the field's
rule (docs/requests.md) says so, with INVALID_PATH for a path and VALIDATION_FAILED otherwise,
naming the field; a refused request changes no row and heals no partition (no ``_owner``, root
or ``_access/...``); PostgreSQL gives the same answer as the in-memory store.

The journal's own refusals (checksum, unsafe directory) are tested at ledger level in
tests/ledger/ (test_journal_directory.py, test_journal_restart.py); here they are driven through
the Mesh, which is what a deployment touches.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from reactivex import Observable

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.exceptions import JournalError, NodeValidationError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import (
    MAX_LABEL_LENGTH,
    MAX_REQUEST_ID_LENGTH,
    NODE_TYPE_PATTERN,
    NodeQuery,
    validate_content,
    validate_label,
    validate_path,
    validate_request_id,
    validate_stored_text,
    validate_user_id,
)
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    RejectionReason,
    UpdateNodeRequest,
)
from rxmesh.providers.memory import InMemoryStore
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultInjectingStore
from tests.conftest import PG_DSN, SESSION, require_server, session_prefix
from tests.helpers import LogRecords, answers, constructed
from tests.providers.postgres.kinds import drop_schemas

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
    prefix = session_prefix("h")
    yield prefix
    asyncio.run(drop_schemas(PG_DSN, prefix))


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
    prefix = session_prefix("h")
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
    prefix = session_prefix("h")
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
    mesh.ledger.close()
    # The three entries share the log's segment: tear one entry in half (its newline kept, so it
    # is not the last group's unfinished write) and edit another.
    assert torn == edited
    lines = torn.read_bytes().split(b"\n")
    for index, line in enumerate(lines):
        if b'"path":"p/torn"' in line:
            lines[index] = line[: len(line) // 2]
        elif b'"path":"p/edited"' in line:
            lines[index] = line.replace(b'"v":1', b'"v":2')
    torn.write_bytes(b"\n".join(lines))

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
    corrupt = [p for p in journal.iterdir() if p.name.endswith(".corrupt")]
    # Both bad entries were copied aside, beside the segment they were read from.
    assert sum(p.read_bytes().count(b"\n") for p in corrupt) == 2
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


# -- every string field of every verb (issue 13) -----------------------------------------------

HOSTILE_STRINGS = [
    "\x00", "x\x00y", "\ud800", "x\udfff", "\udbff\udc00", "..", ".", "", " ", "a\nb", "\t",
    "\x7f", "\x85", "\u202ep", "\ufeff", "é", "🙂", "x" * 129, "x" * 257, "x" * 5000,
    "alice@example.com", "_x", "_owner", "a/b", "a/../b", "system", "alice", "bob", "A.b-c_1",
    "Note", "req-1", "q/x", "p/existing", "p/_access/alice", "q/" + "y" * 130, *SQL,
]
hostile_strings = st.one_of(st.sampled_from(HOSTILE_STRINGS), _text(40), _text(300))


def _rule(check: Callable[[str], object]) -> Callable[[str], bool]:
    def ok(value: str) -> bool:
        try:
            check(value)
        except NodeValidationError:  # InvalidPathError included
            return False
        return True

    return ok


def _storable(value: str) -> bool:
    return _rule(lambda v: validate_content("p/x", v))(value)


def _stored(max_length: int) -> Callable[[str], bool]:
    return _rule(lambda v: validate_stored_text(v, field="f", max_length=max_length))


@dataclass(frozen=True)
class Field:
    """A string field of a request: where it goes, which rule it obeys, how a refusal names it."""

    name: str
    verbs: tuple[str, ...]
    ok: Callable[[str], bool]
    named: str
    reason: RejectionReason = RejectionReason.VALIDATION_FAILED

    def place(self, verb: str) -> str:
        """The dotted place of the field in ``verb``'s request (a bulk request's first node)."""
        name = self.name.removeprefix("requester:")
        return name.replace("node.", "nodes.0.", 1) if verb == "create_nodes" else name


NODE_VERBS = ("create_node", "create_nodes", "update_node")
ALL_VERBS = (*NODE_VERBS, "delete_node", "move_node")
FIELDS = [
    Field("request_id", ALL_VERBS, _rule(validate_request_id), "request_id"),
    Field("access.user", ALL_VERBS, _rule(validate_user_id), "access.user"),
    Field("access.on_behalf_of", ALL_VERBS, _rule(validate_label), "access.on_behalf_of"),
    # created_by names the requester only when access is absent; otherwise it is ignored (the mesh
    # stamps its own) and need only be storable, as a stored row's is.
    Field("requester:node.created_by", NODE_VERBS, _rule(validate_user_id), "created_by"),
    Field("node.created_by", NODE_VERBS, _stored(MAX_LABEL_LENGTH), "created_by"),
    Field("node.request_id", NODE_VERBS, _stored(MAX_REQUEST_ID_LENGTH), "request_id"),
    Field("node.node_type", NODE_VERBS, lambda v: re.fullmatch(NODE_TYPE_PATTERN, v) is not None,
          "node_type"),
    Field("node.path", NODE_VERBS, _rule(lambda v: validate_path(v, allow_reserved=False)), "path",
          RejectionReason.INVALID_PATH),
    Field("path", ("delete_node",), _rule(lambda v: validate_path(v, allow_reserved=False)),
          "path", RejectionReason.INVALID_PATH),
    Field("source", ("move_node",), _rule(lambda v: validate_path(v, allow_reserved=False)),
          "source", RejectionReason.INVALID_PATH),
    Field("target", ("move_node",), _rule(lambda v: validate_path(v, allow_reserved=False)),
          "target", RejectionReason.INVALID_PATH),
    Field("node.content.<key>", NODE_VERBS, _storable, "content"),
    Field("node.content.k", NODE_VERBS, _storable, "content"),
]
FIELD_VERBS = [(field, verb) for field in FIELDS for verb in field.verbs]

BODIES: dict[str, dict[str, Any]] = {
    "create_node": {"node": {"path": "q/new", "node_type": "Note", "content": {"v": 1}}},
    "create_nodes": {"nodes": [{"path": "q/new", "content": {"v": 1}}, {"path": "q/two"}]},
    "update_node": {"node": {"path": "p/existing", "content": {"v": 2}}},
    "delete_node": {"path": "p/existing"},
    "move_node": {"source": "p/existing", "target": "q/moved"},
}
MODELS: dict[str, type[BaseModel]] = {
    "create_node": CreateNodeRequest,
    "create_nodes": CreateNodesRequest,
    "update_node": UpdateNodeRequest,
    "delete_node": DeleteNodeRequest,
    "move_node": MoveNodeRequest,
}
ANSWERS = {None, *REFUSALS, RejectionReason.FORBIDDEN}
"""What a hostile request may be answered: success or a verdict; never UNKNOWN or UNAVAILABLE."""


def _request(verb: str, field: Field, value: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(BODIES[verb]))
    body.update(request_id="req-h")
    if not field.name.startswith("requester:"):
        body["access"] = {"user": "alice"}
    if verb == "create_nodes":
        body["nodes"][1]["content"] = {}
    target: Any = body
    *parents, last = field.place(verb).split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    if last == "<key>":
        target.clear()
        target[value] = 1
    else:
        target[last] = value
    return body


def _as_sent(verb: str, field: Field, body: dict[str, Any], form: str) -> Any:
    """The request in ``form``: JSON text, a mapping, or a model (built with validation; when the
    model refuses the value in-process it must name the field, and the mesh then gets the same
    request built without validation, which it must refuse all the same)."""
    if form == "json":
        return json.dumps(body)
    if form == "mapping":
        return body
    try:
        return MODELS[verb].model_validate(body)
    except ValidationError as exc:
        places = {".".join(str(p) for p in error["loc"]) for error in exc.errors()}
        expected = field.place(verb)
        if "<key>" in expected:
            expected = expected.rsplit(".", 1)[0]
        assert any(place.startswith(expected) for place in places), (places, field.name)
    return constructed(MODELS[verb], body)


async def _seed(mesh: Mesh) -> None:
    await mesh.create(MeshNode(path="p/existing", content={"v": 0}), access=AccessContext(**ALICE))


async def _ask(mesh: Mesh, verb: str, request: Any) -> Any:
    method: Callable[[Any], Observable[Any]] = getattr(mesh, verb)
    got = await answers(method(request))  # a verb never raises: an exception fails the test
    assert len(got) == 1, f"{verb} answered {len(got)} times: {got}"
    assert not isinstance(got[0], BaseException), f"{verb} errored: {got[0]!r}"
    return got[0]


def _as_read(value: str, form: str) -> str:
    """``value`` as the mesh reads it: JSON text turns two surrogates that form a pair
    (``"\\udbff\\udc00"``) into the one character they escape."""
    return json.loads(json.dumps(value)) if form == "json" else value


def _judge(answer: Any, verb: str, field: Field, value: str) -> None:
    """The properties of one answer to a request with ``value`` in ``field``."""
    reason = answer.rejection_reason
    assert reason in ANSWERS, (reason, answer.error)
    error = answer.error or ""
    if not field.ok(value):
        assert reason is field.reason, (verb, field.name, value, reason, error)
        assert field.named in error, (field.named, error)
    elif reason in {RejectionReason.INVALID_PATH, RejectionReason.VALIDATION_FAILED}:
        # A valid value is never refused for a string rule; only a path may name no node.
        assert field.reason is RejectionReason.INVALID_PATH, (field.name, value, error)
        assert "no node at" in error or "reserved" in error, error


async def test_a_move_of_a_missing_source_into_a_new_partition_heals_no_partition() -> None:
    """FAILS against the old move: the target partition was bootstrapped with heal=True (its
    _owner, root and _access/<user> written) before store.move() found the source absent."""
    store = InMemoryStore()
    mesh = Mesh(store, retry_delays=(0.001,), ledger=PendingWriteLedger(journal_dir=None))
    try:
        await _seed(mesh)
        before = _memory_rows(store)
        answer = await _ask(
            mesh, "move_node", {"source": "p/missing", "target": "q/moved", "access": ALICE}
        )
    finally:
        mesh.dispose()
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert _memory_rows(store) == before  # no q/_owner, no q, no q/_access/alice


def _memory_rows(store: InMemoryStore) -> list[tuple[Any, ...]]:
    return [
        (n.path, n.node_type, n.content, n.version, n.created_by, n.request_id)
        for n in store.nodes()
    ]


async def _asked_and_judged(verb: str, field: Field, value: str, form: str) -> tuple[Any, bool]:
    """A fresh seeded in-memory mesh asked ``verb`` with ``value`` in ``field`` (sent in ``form``),
    its answer judged by the field's rule: the answer, and whether the rows are as they were."""
    store = InMemoryStore()
    mesh = Mesh(store, retry_delays=(0.001,), ledger=PendingWriteLedger(journal_dir=None))
    try:
        await _seed(mesh)
        before = _memory_rows(store)
        body = _request(verb, field, value)
        answer = await _ask(mesh, verb, _as_sent(verb, field, body, form))
        _judge(answer, verb, field, _as_read(value, form))
        return answer, _memory_rows(store) == before
    finally:
        mesh.dispose()


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field_verb=st.sampled_from(FIELD_VERBS),
    value=hostile_strings,
    form=st.sampled_from(["model", "mapping", "json"]),
)
def test_a_hostile_string_in_any_field_of_any_verb_is_answered_once_and_refused_by_its_rule(
    field_verb: tuple[Field, str], value: str, form: str
) -> None:
    field, verb = field_verb
    answer, unchanged = asyncio.run(_asked_and_judged(verb, field, value, form))
    if not answer.success:
        assert unchanged, "a refused request changed or healed rows"


@pytest.mark.parametrize("form", ["model", "mapping", "json"])
@pytest.mark.parametrize(("field", "verb"), FIELD_VERBS, ids=lambda v: getattr(v, "name", v))
def test_every_field_of_every_verb_refuses_a_nul_and_a_lone_surrogate(
    field: Field, verb: str, form: str
) -> None:
    """The example-based floor under the property above: NUL and a lone surrogate, everywhere."""
    for value in ("x\x00", "x\ud800"):
        answer, unchanged = asyncio.run(_asked_and_judged(verb, field, value, form))
        assert answer.rejection_reason is field.reason
        assert unchanged


_PG_EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def pg_family() -> Iterator[str]:
    """A schema-prefix family for the cross-store examples (each gets its own prefix)."""
    require_server(PG_DSN, 5432, "PostgreSQL")
    family = f"rxq{SESSION}{secrets.token_hex(1)}"
    yield family
    asyncio.run(drop_schemas(PG_DSN, family))


async def _pg_rows(prefix: str) -> list[tuple[Any, ...]]:
    """Every row of every schema of ``prefix`` (system records included), as the memory rows."""
    conn = await asyncpg.connect(PG_DSN, timeout=5.0)
    try:
        rows: list[tuple[Any, ...]] = []
        for schema in await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
        ):
            rows.extend(
                (r["path"], r["node_type"], None if r["c"] is None else json.loads(r["c"]),
                 r["version"], r["created_by"], r["request_id"])
                for r in await conn.fetch(
                    "SELECT path, node_type, content::text AS c, version, created_by, request_id"
                    f" FROM {quote_identifier(schema[0])}.nodes"
                )
            )
        return sorted(rows, key=lambda row: row[0])
    finally:
        await conn.close()


@pytest.mark.postgres
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field_verb=st.sampled_from(FIELD_VERBS),
    value=hostile_strings,
    form=st.sampled_from(["model", "mapping", "json"]),
)
def test_postgres_gives_a_hostile_string_the_same_answer_as_the_memory_store(
    pg_family: str, field_verb: tuple[Field, str], value: str, form: str
) -> None:
    field, verb = field_verb
    prefix = f"{pg_family}{next(_PG_EXAMPLES):04d}_"

    async def run() -> None:
        memory = InMemoryStore()
        postgres = PostgresStore(PG_DSN, schema_prefix=prefix, max_size=2)
        await postgres.start()
        got: dict[str, Any] = {}
        try:
            for name, store in (("memory", memory), ("postgres", postgres)):
                ledger = PendingWriteLedger(journal_dir=None)
                mesh = Mesh(store, retry_delays=(0.01,), ledger=ledger)
                try:
                    await _seed(mesh)
                    before = _memory_rows(memory) if name == "memory" else await _pg_rows(prefix)
                    body = _request(verb, field, value)
                    answer = await _ask(mesh, verb, _as_sent(verb, field, body, form))
                    _judge(answer, verb, field, _as_read(value, form))
                    after = _memory_rows(memory) if name == "memory" else await _pg_rows(prefix)
                    if not answer.success:
                        assert after == before, f"a refused request changed {name}'s rows"
                    got[name] = answer
                finally:
                    mesh.dispose()
        finally:
            await postgres.close()
        assert got["postgres"].rejection_reason == got["memory"].rejection_reason, (
            got["postgres"].error, got["memory"].error
        )
        if not got["memory"].success:
            assert got["postgres"].error == got["memory"].error

    asyncio.run(run())
