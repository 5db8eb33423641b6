"""Every string field of every request is checked before any store call (docs/requests.md).

A rule per field and a refusal of each rule (with its negative control): the models refuse an
invalid value in-process, the mesh answers a mapping or JSON text INVALID_PATH / VALIDATION_FAILED
naming the field, a request built without validation (``model_construct``) is refused the same
way, and JSON text may not repeat a key. The three cases issue 13 reported are at the end, each
FAILING against the code before this change.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel, ValidationError
from reactivex import Observable

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.exceptions import NodeValidationError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import validate_label, validate_request_id, validate_user_id
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
from tests.conftest import PG_DSN
from tests.helpers import answers, constructed
from tests.mesh.conftest import FAST

NOT_USER_IDS = [
    "", "u\x00x", "..", ".", "a/b", "_x", "_owner", "alice@example.com", "a b", "é", "x" * 129,
    "\ud800", "a\nb", "alice\n", "🙂",
]
USER_IDS = ["alice", "system", "A.b-c_1", "x" * 128, "svc.import-1", "...", "-x"]
NOT_REQUEST_IDS = ["", "r\x00", "r\ud800", "r\nx", "r\x7f", "r\x85", "x" * 129]
REQUEST_IDS = ["req-1", "réq ü 🙂", "x" * 128, "a/b:c", "{3f2a}"]
NOT_LABELS = ["x\x00", "x\ud800", "x\ty", "x" * 257]
LABELS = ["", "svc-import", "alice@example.com", "Ünïcode 🙂", "x" * 256]


async def one_answer(source: Observable[Any]) -> Any:
    got = await answers(source, timeout=5.0, settle=0.01)  # anything late would land
    assert len(got) == 1, got
    assert not isinstance(got[0], BaseException), got[0]
    return got[0]


def away_mesh(**options: Any) -> tuple[Mesh, FaultInjectingStore]:
    """A mesh whose store refuses every read and write as unreachable: any store call would be
    answered UNAVAILABLE, so a refusal proves nothing reached the store."""
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_reads_as_unreachable()
    store.refuse_writes_as_unreachable()
    options.setdefault("ledger", PendingWriteLedger(journal_dir=None))
    return Mesh(store, retry_delays=FAST, **options), store


# -- the model-level rules -----------------------------------------------------------------------


@pytest.mark.parametrize("user", NOT_USER_IDS)
def test_an_access_context_refuses_what_is_not_a_user_id(user: str) -> None:
    with pytest.raises(ValidationError) as raised:
        AccessContext(user=user)
    assert raised.value.errors()[0]["loc"] == ("user",)
    with pytest.raises(NodeValidationError, match=r"^access\.user: "):
        validate_user_id(user, field="access.user")


@pytest.mark.parametrize("user", USER_IDS)
def test_an_access_context_accepts_a_user_id(user: str) -> None:
    assert AccessContext(user=user).user == user
    assert validate_user_id(user) == user


def test_the_refusal_of_an_e_mail_address_states_the_rule() -> None:
    with pytest.raises(NodeValidationError) as raised:
        validate_user_id("alice@example.com", field="access.user")
    assert "[A-Za-z0-9._-]" in str(raised.value)
    assert "_access/<user>" in str(raised.value)


@pytest.mark.parametrize("user", NOT_USER_IDS + USER_IDS)
def test_the_published_json_schema_states_the_user_id_rule(user: str) -> None:
    """A client validating against the JSON Schema agrees with the mesh on every user id."""
    pattern = AccessContext.model_json_schema()["properties"]["user"]["pattern"]
    ok = True
    try:
        validate_user_id(user)
    except NodeValidationError:
        ok = False
    assert (re.fullmatch(pattern, user) is not None) == ok  # fullmatch: "$" as JSON Schema means it


@pytest.mark.parametrize("label", NOT_LABELS)
def test_on_behalf_of_refuses_what_no_store_or_log_can_keep(label: str) -> None:
    with pytest.raises(ValidationError) as raised:
        AccessContext(user="alice", on_behalf_of=label)
    assert raised.value.errors()[0]["loc"] == ("on_behalf_of",)
    with pytest.raises(NodeValidationError):
        validate_label(label)


@pytest.mark.parametrize("label", LABELS)
def test_on_behalf_of_accepts_any_other_text(label: str) -> None:
    assert AccessContext(user="alice", on_behalf_of=label).on_behalf_of == label


REQUEST_MODELS: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (CreateNodeRequest, {"node": {"path": "p/a", "content": {}}}),
    (CreateNodesRequest, {"nodes": [{"path": "p/a", "content": {}}]}),
    (UpdateNodeRequest, {"node": {"path": "p/a", "content": {}}}),
    (DeleteNodeRequest, {"path": "p/a"}),
    (MoveNodeRequest, {"source": "p/a", "target": "p/b"}),
]
MODEL_IDS = [model.__name__ for model, _ in REQUEST_MODELS]


@pytest.mark.parametrize("request_id", NOT_REQUEST_IDS)
@pytest.mark.parametrize(("model", "body"), REQUEST_MODELS, ids=MODEL_IDS)
def test_every_request_model_refuses_a_bad_request_id(
    model: type[BaseModel], body: dict[str, Any], request_id: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        model.model_validate({**body, "request_id": request_id})
    assert raised.value.errors()[0]["loc"] == ("request_id",)
    with pytest.raises(NodeValidationError, match=r"^request_id: "):
        validate_request_id(request_id)


@pytest.mark.parametrize("request_id", REQUEST_IDS)
@pytest.mark.parametrize(("model", "body"), REQUEST_MODELS, ids=MODEL_IDS)
def test_every_request_model_accepts_a_request_id(
    model: type[BaseModel], body: dict[str, Any], request_id: str
) -> None:
    assert model.model_validate({**body, "request_id": request_id}).request_id == request_id


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (DeleteNodeRequest, {"path": "p/../x"}, "path"),
        (MoveNodeRequest, {"source": "p/a\x00", "target": "p/b"}, "source"),
        (MoveNodeRequest, {"source": "p/a", "target": "p/\ud800"}, "target"),
    ],
)
def test_delete_and_move_refuse_a_path_that_breaks_the_path_rules(
    model: type[BaseModel], body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        model.model_validate(body)
    assert raised.value.errors()[0]["loc"] == (field,)


def test_delete_and_move_still_take_a_system_record_path_for_the_mesh_to_judge() -> None:
    """Negative control: a reserved segment is the mesh's call (the system may use it)."""
    assert DeleteNodeRequest(path="p/_access/bob").path == "p/_access/bob"
    assert MoveNodeRequest(source="p/_owner", target="p/x").source == "p/_owner"


@pytest.mark.parametrize("created_by", ["a\x00", "\udfff", "x" * 257])
def test_a_stored_node_refuses_a_created_by_no_store_can_keep(created_by: str) -> None:
    with pytest.raises(ValidationError) as raised:
        MeshNode(path="p/a", content={}, created_by=created_by)
    assert raised.value.errors()[0]["loc"] == ("created_by",)


@pytest.mark.parametrize("created_by", ["alice@example.com", "line\nbreak", "x" * 256, ""])
def test_a_stored_node_still_reads_back_whatever_created_by_a_store_could_hold(
    created_by: str,
) -> None:
    """Negative control: a row written before these rules (or straight to the store) reads."""
    assert MeshNode(path="p/a", content={}, created_by=created_by).created_by == created_by


@pytest.mark.parametrize(("request_id", "ok"), [("r\x00", False), ("r\ud800", False),
                                                ("x" * 129, False), ("r\n", True), ("", True)])
def test_a_stored_node_keeps_any_storable_request_id(request_id: str, ok: bool) -> None:
    if ok:
        assert MeshNode(path="p/a", request_id=request_id).request_id == request_id
    else:
        with pytest.raises(ValidationError):
            MeshNode(path="p/a", request_id=request_id)


# -- the mesh refuses a mapping or JSON text naming the field, before any store call ---------------

NODE = {"path": "q/n", "content": {"v": 1}}
ALICE = {"user": "alice"}
VERB_BODIES: dict[str, dict[str, Any]] = {
    "create_node": {"node": NODE, "access": ALICE, "request_id": "req-1"},
    "create_nodes": {"nodes": [NODE, {"path": "q/o", "content": {}}], "access": ALICE,
                     "request_id": "req-1"},
    "update_node": {"node": NODE, "access": ALICE, "request_id": "req-1"},
    "delete_node": {"path": "q/n", "access": ALICE, "request_id": "req-1"},
    "move_node": {"source": "q/n", "target": "q/m", "access": ALICE, "request_id": "req-1"},
}


def _send(mesh: Mesh, verb: str, request: Any) -> Observable[Any]:
    method: Any = getattr(mesh, verb)
    return method(request)


def _with(body: dict[str, Any], field: str, value: object) -> dict[str, Any]:
    """``body`` with the dotted ``field`` (``access.user``, ``nodes.0.created_by``) set; a field
    written ``requester:node.created_by`` is set in a body without ``access`` (so it names the
    requester)."""
    copy = json.loads(json.dumps(body))
    if field.startswith("requester:"):
        field = field.removeprefix("requester:")
        del copy["access"]
    target: Any = copy
    *parents, last = field.split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    target[last] = value
    return copy


FIELD_CASES = [
    # (verb, field, value, reason, named)
    *[(verb, "request_id", "r\x00", "VALIDATION_FAILED", "request_id: ") for verb in VERB_BODIES],
    *[(verb, "access.user", "u\x00x", "VALIDATION_FAILED", "access.user: ")
      for verb in VERB_BODIES],
    *[(verb, "access.user", "..", "VALIDATION_FAILED", "access.user: ") for verb in VERB_BODIES],
    *[(verb, "access.on_behalf_of", "x\ud800", "VALIDATION_FAILED", "access.on_behalf_of: ")
      for verb in VERB_BODIES],
    ("create_node", "requester:node.created_by", "alice@example.com", "VALIDATION_FAILED",
     "node.created_by: "),
    ("create_node", "requester:node.created_by", "", "VALIDATION_FAILED", "node.created_by: "),
    ("update_node", "requester:node.created_by", "_x", "VALIDATION_FAILED", "node.created_by: "),
    ("create_nodes", "requester:nodes.0.created_by", "a/b", "VALIDATION_FAILED",
     "nodes.0.created_by: "),
    ("create_node", "node.created_by", "a\x00", "VALIDATION_FAILED", "node.created_by: "),
    ("update_node", "node.created_by", "\udfff", "VALIDATION_FAILED", "node.created_by: "),
    ("create_nodes", "nodes.1.created_by", "x" * 257, "VALIDATION_FAILED", "nodes.1.created_by: "),
    ("create_node", "node.request_id", "r\x00", "VALIDATION_FAILED", "node.request_id: "),
    ("update_node", "node.request_id", "x" * 129, "VALIDATION_FAILED", "node.request_id: "),
    ("create_node", "node.node_type", "T\x00", "VALIDATION_FAILED", "node.node_type: "),
    ("create_node", "node.path", "q/\x00", "INVALID_PATH", "node.path: "),
    ("create_nodes", "nodes.0.path", "q/..", "INVALID_PATH", "nodes.0.path: "),
    ("update_node", "node.path", "q/\ud800", "INVALID_PATH", "node.path: "),
    ("delete_node", "path", "q/\x00", "INVALID_PATH", "path: "),
    ("move_node", "source", "q/..", "INVALID_PATH", "source: "),
    ("move_node", "target", "q/\ud800", "INVALID_PATH", "target: "),
    ("create_node", "node.content.k", "a\x00", "VALIDATION_FAILED", "content.k"),
    ("create_node", "node.content.k", "\ud800", "VALIDATION_FAILED", "content.k"),
    ("update_node", "node.content.k", "a\x00", "VALIDATION_FAILED", "content.k"),
    ("create_nodes", "nodes.0.content.k", "\ud800", "VALIDATION_FAILED", "content.k"),
]


@pytest.mark.parametrize("as_json", [False, True], ids=["mapping", "json"])
@pytest.mark.parametrize(("verb", "field", "value", "reason", "named"), FIELD_CASES)
async def test_a_bad_string_is_refused_naming_its_field_before_any_store_call(
    verb: str, field: str, value: str, reason: str, named: str, as_json: bool
) -> None:
    mesh, store = away_mesh()
    request: Any = _with(VERB_BODIES[verb], field, value)
    if as_json:
        request = json.dumps(request)
    answer = await one_answer(_send(mesh, verb, request))
    assert answer.rejection_reason == RejectionReason(reason), answer.error
    assert named in (answer.error or ""), answer.error
    assert store.statistics().operations == 0  # not a read, not a write, not a heal
    mesh.dispose()


@pytest.mark.parametrize("verb", sorted(VERB_BODIES))
async def test_the_same_requests_without_the_bad_string_reach_the_store(verb: str) -> None:
    """Negative control: the valid bodies above are not refused up front."""
    mesh, store = away_mesh()
    answer = await one_answer(_send(mesh, verb, json.dumps(VERB_BODIES[verb])))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer.error
    assert store.statistics().operations > 0
    mesh.dispose()


@pytest.mark.parametrize("verb", ["create_node", "update_node", "create_nodes"])
@pytest.mark.parametrize("created_by", ["alice@example.com", "line\nbreak", "_x"])
async def test_a_created_by_that_names_nobody_need_only_be_storable(
    verb: str, created_by: str
) -> None:
    """Negative control: with ``access`` given, the mesh stamps (create) or keeps (update) its own
    ``created_by``; the one sent is ignored, so a node read back from a store can be sent again."""
    mesh, store = away_mesh()
    field = "nodes.1.created_by" if verb == "create_nodes" else "node.created_by"
    answer = await one_answer(_send(mesh, verb, _with(VERB_BODIES[verb], field, created_by)))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer.error
    mesh.dispose()


async def test_a_created_by_that_is_a_user_id_names_the_requester() -> None:
    """Negative control for node.created_by: a user id is accepted and becomes the requester."""
    mesh = Mesh(InMemoryStore(), retry_delays=FAST, ledger=PendingWriteLedger(journal_dir=None))
    answer = await one_answer(
        mesh.create_node({"node": {"path": "q/n", "content": {}, "created_by": "bob"}})
    )
    assert answer.success, answer.error
    assert answer.node.created_by == "bob"
    mesh.dispose()


VERB_MODELS: dict[str, type[BaseModel]] = {
    "create_node": CreateNodeRequest,
    "create_nodes": CreateNodesRequest,
    "update_node": UpdateNodeRequest,
    "delete_node": DeleteNodeRequest,
    "move_node": MoveNodeRequest,
}


@pytest.mark.parametrize(("verb", "field", "value", "reason", "named"), FIELD_CASES)
async def test_a_request_built_without_validation_is_refused_all_the_same(
    verb: str, field: str, value: str, reason: str, named: str
) -> None:
    """``model_construct`` and ``model_copy(update=...)`` skip the models' rules; the mesh does not
    trust that a request object went through them."""
    mesh, store = away_mesh()
    request = constructed(VERB_MODELS[verb], _with(VERB_BODIES[verb], field, value))
    answer = await one_answer(_send(mesh, verb, request))
    assert answer.rejection_reason == RejectionReason(reason), answer.error
    assert field.rsplit(".", 1)[-1] in (answer.error or ""), answer.error
    assert store.statistics().operations == 0
    mesh.dispose()


async def test_a_model_copy_with_a_bad_request_id_is_refused_and_answered_as_unknown() -> None:
    mesh, store = away_mesh()
    good = CreateNodeRequest(node=MeshNode(path="q/n", content={}), access=AccessContext(**ALICE))
    answer = await one_answer(mesh.create_node(good.model_copy(update={"request_id": "r\x00"})))
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert answer.error.startswith("request_id: ")
    assert answer.request_id == "unknown"  # the id itself is what was refused
    assert store.statistics().operations == 0
    mesh.dispose()


async def test_a_refusal_keeps_the_callers_request_id_when_that_is_valid() -> None:
    mesh, _ = away_mesh()
    request = _with(VERB_BODIES["create_node"], "access.user", "..")
    answer = await one_answer(mesh.create_node(json.dumps(request)))
    assert answer.request_id == "req-1"
    mesh.dispose()


async def test_a_lone_surrogate_in_json_text_is_refused_naming_the_field_not_a_column() -> None:
    """pydantic's JSON parser cannot read a lone surrogate ('unexpected end of hex escape at line 1
    column 81'); the mesh validates the decoded value instead, as it validates a mapping."""
    mesh, _ = away_mesh()
    request = _with(VERB_BODIES["create_node"], "access.on_behalf_of", "x\ud800")
    text = json.dumps(request)
    assert "\\ud800" in text
    by_json = await one_answer(mesh.create_node(text))
    by_mapping = await one_answer(mesh.create_node(request))
    assert by_json.error == by_mapping.error
    assert by_json.error.startswith("access.on_behalf_of: ")
    mesh.dispose()


# -- JSON text may not repeat a key ----------------------------------------------------------------

DUPLICATES = [
    # (verb, text, named)
    ("create_node",
     '{"node": {"path": "q/a", "content": {}}, "node": {"path": "q/b", "content": {}}}',
     "request: the key 'node' appears more than once"),
    ("create_node",
     '{"node": {"path": "q/a", "content": {}}, "access": {"user": "alice", "user": "system"}}',
     "access: the key 'user' appears more than once"),
    ("create_node",
     '{"node": {"path": "q/a", "path": "q/b", "content": {}}, "access": {"user": "alice"}}',
     "node: the key 'path' appears more than once"),
    ("create_node",
     '{"node": {"path": "q/a", "content": {"a": {"k": 1, "k": 2}}}, "access": {"user": "alice"}}',
     "node.content.a: the key 'k' appears more than once"),
    ("create_nodes",
     '{"nodes": [{"path": "q/a", "content": {}}, {"path": "q/b", "content": {}, "content": 1}],'
     ' "access": {"user": "alice"}}',
     "nodes.1: the key 'content' appears more than once"),
    ("update_node",
     '{"node": {"path": "q/a", "content": {}}, "access": {"user": "a"}, "request_id": "1",'
     ' "request_id": "2"}',
     "request: the key 'request_id' appears more than once"),
    ("delete_node", '{"path": "q/a", "path": "q/b", "access": {"user": "alice"}}',
     "request: the key 'path' appears more than once"),
    ("move_node",
     '{"source": "q/a", "target": "q/b", "access": {"user": "alice", "on_behalf_of": "x",'
     ' "on_behalf_of": "y"}}',
     "access: the key 'on_behalf_of' appears more than once"),
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize(("verb", "text", "named"), DUPLICATES)
async def test_json_text_that_repeats_a_key_is_refused_naming_the_key_and_where(
    verb: str, text: str, named: str, as_bytes: bool
) -> None:
    mesh, store = away_mesh()
    answer = await one_answer(_send(mesh, verb, text.encode() if as_bytes else text))
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert named in (answer.error or ""), answer.error
    assert store.statistics().operations == 0
    mesh.dispose()


async def test_a_repeated_request_id_is_not_echoed_as_the_answers_id() -> None:
    mesh, _ = away_mesh()
    text = '{"path": "q/a", "access": {"user": "a"}, "request_id": "1", "request_id": "2"}'
    answer = await one_answer(mesh.delete_node(text))
    assert answer.request_id == "unknown"  # which of the two would it be?
    mesh.dispose()


async def test_the_same_key_in_different_objects_is_not_a_repeat() -> None:
    """Negative control: ``path`` in two entries, ``user`` at two levels, is ordinary JSON."""
    mesh = Mesh(InMemoryStore(), retry_delays=FAST, ledger=PendingWriteLedger(journal_dir=None))
    text = (
        '{"nodes": [{"path": "q/a", "content": {"user": 1}}, {"path": "q/b", "content": {}}],'
        ' "access": {"user": "alice"}}'
    )
    answer = await one_answer(mesh.create_nodes(text))
    assert answer.success, answer.error
    mesh.dispose()


async def test_text_that_is_not_json_is_still_refused_as_not_json() -> None:
    mesh, _ = away_mesh()
    answer = await one_answer(mesh.create_node('{"node": '))
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "not valid JSON" in (answer.error or "")
    mesh.dispose()


# -- the three cases issue 13 reported -------------------------------------------------------------


@pytest.mark.parametrize("form", ["mapping", "json", "constructed"])
async def test_a_lone_surrogate_in_on_behalf_of_is_refused_before_the_journal_store_away(
    form: str, tmp_path: Path
) -> None:
    """Issue 13, case 1. FAILS against the old code: the value reached the journal's encoder,
    whose ``UnicodeEncodeError`` escaped the terminal arm, and ``create_node`` never answered;
    with the recording step hardened it answers UNAVAILABLE "could NOT be journaled" (and as JSON
    text, "not valid JSON ... column 100"), never refusing the request. Now it is refused up
    front, naming the field, and nothing reaches the store or the journal.
    """
    journal = tmp_path / "journal"
    mesh, store = away_mesh(ledger=PendingWriteLedger(journal))
    body = _with(VERB_BODIES["create_node"], "access.on_behalf_of", "x\ud800")
    request: Any = {
        "mapping": body,
        "json": json.dumps(body),
        "constructed": constructed(CreateNodeRequest, body),
    }[form]
    answer = await one_answer(mesh.create_node(request))
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert answer.error.startswith("access.on_behalf_of: "), answer.error
    assert not mesh.ledger.pending()
    assert not [p for p in journal.glob("*") if p.is_file()]
    assert store.statistics().operations == 0
    mesh.dispose()


async def pg_rows(store: PostgresStore) -> dict[str, tuple[str, ...]]:
    """Every row in every schema of ``store``'s prefix (system records included)."""
    conn = await asyncpg.connect(PG_DSN, timeout=5.0)
    try:
        rows: dict[str, tuple[str, ...]] = {}
        for schema in await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)",
            store.schema_prefix,
        ):
            name = quote_identifier(schema[0])
            for row in await conn.fetch(f"SELECT path, created_by FROM {name}.nodes"):
                rows[row["path"]] = (schema[0], row["created_by"])
        return rows
    finally:
        await conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("as_json", [False, True], ids=["mapping", "json"])
async def test_a_nul_in_request_id_on_postgres_is_refused_before_the_partition_heal(
    pg_store: PostgresStore, as_json: bool
) -> None:
    """Issue 13, case 2. FAILS against the old code: PostgreSQL answered UNKNOWN
    (``CharacterNotInRepertoireError``) only at the node's INSERT, after the partition heal had
    written ``<p>/_owner``, the root ``<p>`` and ``<p>/_access/alice``. Now it is refused
    VALIDATION_FAILED naming request_id, and no row or schema exists."""
    mesh = Mesh(pg_store, retry_delays=(0.01,), ledger=PendingWriteLedger(journal_dir=None))
    partition = f"h{uuid.uuid4().hex[:8]}"
    body = {"node": {"path": f"{partition}/n", "content": {}}, "access": ALICE,
            "request_id": "r\x00x"}
    try:
        answer = await one_answer(mesh.create_node(json.dumps(body) if as_json else body))
    finally:
        mesh.dispose()
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert answer.error.startswith("request_id: "), answer.error
    assert await pg_rows(pg_store) == {}  # no _owner, no root, no _access/alice


@pytest.mark.postgres
@pytest.mark.parametrize("user", ["u\x00x", ".."])
async def test_an_access_user_that_is_not_a_user_id_gets_the_same_answer_on_both_stores(
    pg_store: PostgresStore, user: str
) -> None:
    """Issue 13, case 3. FAILS against the old code: memory answered UNKNOWN ("ValidationError
    ... for MeshNode") after writing ``<p>/_owner`` and the root, and PostgreSQL answered
    INVALID_PATH naming '<p>/_access/..', a path the caller never sent: two stores, two answers.
    Now both answer VALIDATION_FAILED naming access.user, word for word, and write nothing."""
    partition = f"h{uuid.uuid4().hex[:8]}"
    body = {"node": {"path": f"{partition}/n", "content": {}}, "access": {"user": user},
            "request_id": "req-1"}
    memory = InMemoryStore()
    by_store = {}
    for name, store in (("memory", memory), ("postgres", pg_store)):
        mesh = Mesh(store, retry_delays=(0.01,), ledger=PendingWriteLedger(journal_dir=None))
        try:
            by_store[name] = await one_answer(mesh.create_node(body))
        finally:
            mesh.dispose()
    for answer in by_store.values():
        assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
        assert answer.error.startswith("access.user: "), answer.error
    assert by_store["memory"].error == by_store["postgres"].error
    assert memory.nodes() == []
    assert await pg_rows(pg_store) == {}


@pytest.mark.parametrize("user", ["u\x00x", ".."])
async def test_an_access_user_that_is_not_a_user_id_writes_nothing_in_memory(user: str) -> None:
    """Issue 13, case 3 without a server. FAILS against the old code (memory answered UNKNOWN
    after writing ``<p>/_owner`` and the root ``<p>``)."""
    store = InMemoryStore()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal_dir=None))
    body = {"node": {"path": "q/n", "content": {}}, "access": {"user": user}}
    answer = await one_answer(mesh.create_node(body))
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert answer.error.startswith("access.user: ")
    assert store.nodes() == []
    mesh.dispose()


async def test_a_user_id_that_adds_segments_cannot_plant_a_grant_elsewhere() -> None:
    """FAILS against the old code: access.user 'a/b' was accepted and its grant written at
    'q/_access/a/b' (a path below another grant's), creating the node."""
    store = InMemoryStore()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal_dir=None))
    answer = await one_answer(
        mesh.create_node({"node": {"path": "q/n", "content": {}}, "access": {"user": "a/b"}})
    )
    assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer.error
    assert store.nodes() == []
    mesh.dispose()
