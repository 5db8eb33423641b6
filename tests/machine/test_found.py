"""The sequences the model-based check found (issue 20), replayed verbatim through its driver.

Each replay must be green on the product as it is. Each one that names a mutant must also FAIL,
on the invariant named, when the defect it found is put back at run time
(``tests/machine/_mutants.py``: ``bug1`` ... ``bug4`` undo the fix of commit c122163 in place). So
such a replay cannot pass vacuously: the second test proves it still reaches the defect. All of
them fail on the tree before c122163 (101343f). ``bug1-issue`` is green-only now: its schedule
no longer reaches the defect once the mesh awaits store coroutines directly; the forced race in
tests/mesh/test_concurrency_faults.py catches that mutant instead. ``bug2-via-ledger`` names no
mutant: the fix
closed its route twice (a bulk now judges every partition before healing any, so that retry is
FORBIDDEN before it writes), and no single mutant reopens both.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ._driver import (
    Batch,
    Driver,
    Op,
    Toggle,
    bulk,
    create,
    delete,
    resend,
    retry,
    reuse,
    steal,
    undo,
)
from ._harness import InvariantViolation
from ._mutants import BY_NAME

Step = Batch | str  # a batch, or a fault knob between batches

# The ``issue31-*`` replays are written by hand for issue 31's rules; each fails at 1d389e8 on
# the invariant it names (checked), and with its mutant put back.
FOUND: dict[str, tuple[str | None, str, Sequence[Step]]] = {
    # Bug 1: with the next two reads of beta's facts faulted, B's create of beta/b and C's
    # delete of beta/b (C holds no grant anywhere) retry at the same instant; C's read saw beta
    # new, which authorised the delete; it ran after B's create: both succeeded, B's node gone.
    "bug1-issue": (
        # Green-only since the mesh awaits its store coroutines directly: the delete's facts read
        # and its delete now follow each other too closely for the create's five calls to fit
        # between them, so this schedule no longer reaches the defect. The same defect, with the
        # interleaving forced, is caught deterministically by
        # tests/mesh/test_concurrency_faults.py (test_..._with_the_defect_put_back).
        None,
        "success-true",
        [
            Batch(
                (create("bob", "beta/b"), delete("carol", "beta/b")),
                toggle=Toggle("fault:beta:2"),
            )
        ],
    ),
    # Bug 2: A's bulk [alpha/a, beta/b] succeeds with beta/b another user's row; that user
    # deletes beta/b; A re-issues the bulk verbatim: UNKNOWN "partially landed", no fault.
    "bug2-issue": (
        "bug2",
        "never-unknown",
        [
            Batch((create("bob", "beta/b"),)),
            Batch((bulk("alice", "alpha/a", "beta/b"),)),
            Batch((undo(1),)),
            Batch((resend(1),)),
        ],
    ),
    # Bug 2 by the ledger's hand (found by the machine): the bulk is UNAVAILABLE and recorded;
    # the caller's retry heals alpha, whose commit makes the ledger re-issue alpha/a (LANDED
    # with the bulk's request_id); the caller's next retry finds that row: UNKNOWN.
    "bug2-via-ledger": (
        None,
        "never-unknown",
        [
            Batch((create("system", "beta/b"),), toggle=Toggle("fault:alpha:4")),
            Batch((bulk("alice", "beta/b", "alpha/a", "beta/a"),)),
            Batch((retry(),)),
            Batch((retry(),)),
        ],
    ),
    # Bug 3: a bulk [alpha/a, beta/c] on an empty store with beta's facts read faulted through
    # the ladder: alpha is claimed (owner, root, grant), then the answer says nothing was written.
    "bug3-issue": (
        "bug3",
        "nothing-written",
        [Batch((bulk("alice", "alpha/a", "beta/c"),), toggle=Toggle("fault:beta:4"))],
    ),
    # Bug 3 for a single create (found by the machine): writes refused in the middle of the
    # heal, after the ownership record was written: "Nothing was written".
    "bug3-single-create": (
        "bug3",
        "nothing-written",
        [Batch((create("system", "alpha/a"),), toggle=Toggle("refuse_writes", after=3))],
    ),
    # Bug 4: a create answered UNAVAILABLE and recorded; restored (no gap), the caller re-issues
    # it verbatim (it lands) and deletes the node; the ledger's re-issue creates it again.
    "bug4-issue": (
        "bug4",
        "no-resurrection",
        [
            Batch((create("alice", "alpha/a"),), toggle=Toggle("refuse_writes")),
            Batch((resend(0), delete("alice", "alpha/a")), toggle=Toggle("restore")),
        ],
    ),
    # Issue 31, item 1: alice's create of alpha/b is recorded; carol (no grant) sends a copy
    # with alice's request id: FORBIDDEN, which must not settle alice's intent.
    "issue31-stranger": (
        "stranger-settles",
        "requester-bound",
        [
            Batch((create("alice", "alpha/a"),)),
            Batch((create("alice", "alpha/b"),), toggle=Toggle("refuse_writes")),
            Batch((steal("carol", 0),), toggle=Toggle("restore")),
        ],
    ),
    # Issue 31, item 2: alice's update and then delete of alpha/a are both recorded; on the gap
    # they must run one after the other, the update first.
    "issue31-path-order": (
        "paths-race",
        "path-order",
        [
            Batch((create("alice", "alpha/a"),)),
            Batch((Op("update", "alice", ("alpha/a",)),), toggle=Toggle("refuse_writes")),
            Batch((delete("alice", "alpha/a"),)),
            "restore+gap",
        ],
    ),
    # Issue 31, item 3: alice's update with expected_version=1 is recorded; her delete's commit
    # starts the re-issue while her create puts alpha/a back at version 1: the re-issue must not
    # be applied to that row.
    "issue31-basis": (
        "basis-forgets-its-write",
        "basis-named",
        [
            Batch((create("alice", "alpha/a"),)),
            Batch((Op("update", "alice", ("alpha/a",), which=1),), toggle=Toggle("refuse_writes")),
            Batch(
                (delete("alice", "alpha/a"), create("alice", "alpha/a")),
                toggle=Toggle("restore"),
            ),
        ],
    ),
    # Issue 31, item 4: alice creates alpha/a, then updates it with the create's request id.
    "issue31-reuse": (
        "reuse-is-landed",
        "update-applied",
        [Batch((create("alice", "alpha/a"),)), Batch((reuse(0),))],
    ),
}


def replay(steps: Sequence[Step]) -> None:
    driver = Driver()
    try:
        for step in steps:
            if isinstance(step, Batch):
                driver.batch(step)
            else:
                driver.knob(step)
        driver.drain()
    finally:
        driver.close()


@pytest.mark.parametrize("name", sorted(FOUND))
def test_the_found_sequence_is_green(name: str) -> None:
    replay(FOUND[name][2])


@pytest.mark.parametrize("name", sorted(n for n, found in FOUND.items() if found[0] is not None))
def test_the_found_sequence_fails_with_its_defect_put_back(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bug, invariant, steps = FOUND[name]
    assert bug is not None
    BY_NAME[bug].apply(monkeypatch)
    with pytest.raises(InvariantViolation) as caught:
        replay(steps)
    assert caught.value.invariant == invariant, caught.value
