"""The model-based check of issue 20, on the embedded store.

The machine
-----------
A hypothesis ``RuleBasedStateMachine`` (``tests/machine/_machine.py``) over one
``Mesh(RecordingStore(FaultInjectingStore(InMemoryStore())), retry_delays=(0.25, 0.5, 1.0),
ledger=PendingWriteLedger(""), scheduler=VirtualClock())``:

- users: ``system`` (may do anything), ``alice`` and ``bob`` (each owns the partitions it opens;
  the system grants them verbs by creating ``<partition>/_access/<user>``), ``carol`` (no grant
  anywhere: she never creates, so she never opens a partition);
- paths: ``alpha/a``, ``alpha/b``, ``beta/a``, ``beta/b``, ``beta/c`` in two partitions. Each
  example has a focus path and a second one (``st.shared``) that most requests are about, so
  that they collide;
- rules: ``send`` / ``send_more`` (one batch: 1-3 requests subscribed at once; most steps),
  ``toggle`` (a fault knob between batches), ``drain`` (restore, declare a gap, judge the
  drain); ``teardown`` drains and judges once more;
- a request: ``create``, ``bulk`` (1-3 nodes), ``update``, ``delete``, ``move``, ``grant`` /
  ``revoke`` (the system writes or deletes a grant), ``resend(k)`` (the caller's verbatim
  re-issue of the request it sent k sends ago: same object, same request_id), ``again(k)`` (the
  same over its creates and bulks), ``retry()`` (its
  verbatim re-issue of its latest request answered UNAVAILABLE, as docs/answers.md tells it to),
  ``undo(k, i)`` (the requester of a recent create deletes its node);
- faults: refuse writes, refuse reads, restore, restore + gap, ``fault_next_read(<partition>,
  times=1|2|4)`` (the facts read: root, grant and owner in one read_many; 4 outlasts the
  ladder), as a rule between batches, armed just before a batch, or fired in the MIDDLE of one
  (just before the batch's (k+1)-th store call, k = 1, 2, 3 or 5);
- interleaving: a batch is delivered either at once (requests interleave only at their retry
  timers, and timers due at the same virtual instant fire together, as an asyncio loop's do)
  or one loop turn late at every store call (the store has acted; the mesh hears later), which
  interleaves concurrent requests at every call, as a network does.

Virtual time and determinism: each machine has its own event loop, and the retry ladder runs on
a ``VirtualClock``. A step runs until the loop is idle, then fires the next virtual timers, and
so on until nothing is left. No real sleep happens. With ``derandomize=True`` and no example
database, every run is the same run.

The model
---------
The ``RecordingStore`` wraps the ``FaultInjectingStore`` without changing it. It records every
store call with the request that made it: a ``TracedMesh`` subclass tags each request's
subscription with a context variable, which the task that runs the request inherits, and that
includes the ledger's own re-issues. For each call it records the outcome (ok / refused as
unreachable / other error) and the result. From the results of the writes that succeeded it
keeps a shadow of the store, plus the history of its states (one per write that changed a
row). The oracle (``tests/machine/_harness.py``) keeps the intents it was told are recorded, and
the requests carried after their intent was recorded.

An answer is accepted if it is true at SOME state the store passed through between the request's
subscription and its answer. That is, it is true for some linearisation of the concurrent batch
in which the request takes effect at that point. Each answer is judged on its own (not jointly):
a delete authorised at its facts read and run after a concurrent revoke (a time-of-check race
the product accepts) is accepted, while a delete by a user who held the verb at no point in its
flight is not.

The invariants, judged after every step, and the mutant each one catches
--------------------------------------------------------------------------
``tests/machine/test_mutants.py`` runs the machine against each mutant
(``tests/machine/_mutants.py``, applied with ``monkeypatch`` at run time, undone after; no broken
variant is kept in the product) with only that invariant armed, and asserts the machine fails
on it:

- ``one-answer``: exactly one answer per request (a ledger re-issue: at most one).
  Mutant: ``answers-twice``.
- ``success-row``: a success means the row is there with that request_id until an
  acknowledged write removes it. Mutant: ``loses-writes``.
- ``success-true``: a success only when the requester held the verb (or opened the
  partition) and the node was there / the path free. Mutants: ``anyone-deletes``, ``bug1``.
- ``exists-true``: NODE_ALREADY_EXISTS only when another request's row was there.
  Mutant: ``reissue-says-exists``.
- ``forbidden-true``: FORBIDDEN only when the requester lacked the verb in that partition.
  Mutant: ``grants-ignored``.
- ``refusal-true``: "no node" (VALIDATION_FAILED) only when the node was missing; no other
  validation refusal for valid input. Mutant: ``delete-misses``.
- ``unavailable-own-call``: UNAVAILABLE only when one of that request's own store calls was
  refused. Mutant: ``validation-is-unreachable``.
- ``never-unknown``: never UNKNOWN for valid input (a bulk's partial landing after a refused
  call excepted). Mutants: ``no-node-is-unknown``, ``bug2``.
- ``two-rows``: no path with two rows. Mutant: ``two-rows``.
- ``unacknowledged-write``: no row changed without an acknowledged write. A partition heal's
  records are admitted side effects: the owner record must name the requester, a grant must
  go to the partition's owner, and the read before them is judged by the last invariant.
  Mutants: ``deletes-then-refuses``, ``grants-itself``.
- ``nothing-written``: "Nothing was written" only when nothing was; a list of the records
  written is exactly what was written. Mutant: ``bug3``.
- ``one-verdict``: every recorded intent gets exactly one verdict, and no intent that was
  never recorded gets one; an UNAVAILABLE answer is recorded or says "will not be
  re-issued". Mutant: ``verdict-twice``.
- ``no-resurrection``: the ledger never writes a request that was carried (answered created)
  after its intent was recorded. Mutant: ``bug4``.
- ``ledger-drains``: after a final restore and a gap the ledger drains.
  Mutant: ``gaps-ignored``.
- ``no-heal-after-failed-read``: a partition record is written only after a clean read of
  that partition found it absent. Mutant: ``facts-swallowed``.

``bug1`` ... ``bug4`` put back, at run time, the four defects of issue 20 that commit c122163
fixed. Against the tree before that commit (101343f), each one's invariant fails in a search
from an empty store (with only that invariant armed). Five seeds, up to 12 steps an example,
examples needed: bug 3 (``nothing-written``) 10-314, bug 1 (``success-true``) 224-1081, bug 2
(``never-unknown``) 260-1840, bug 4 (``no-resurrection``) 485-4371. The seed of this test's
profile (up to 24 steps) needs 30, 1096, 124 and 1683 examples respectively. So the CI run
alone, at 800 examples, would have found bugs 3 and 2 by search, and bugs 1 and 4 only in a
longer run. All four are also replayed verbatim, from their shortest sequences, in
``tests/machine/test_found.py``, and each replay fails with its defect put back.

Running it
----------
``pytest tests/machine`` (CI: ``python -m pytest``). Measured on the 2-core development VM:
this test (800 derandomized examples of up to 24 steps) ~31 s, the mutants ~8 s, the replays
~2 s, the PostgreSQL profile (``tests/machine/test_postgres.py``) ~5 s. A longer hunt, about 25
examples a second: ``RXMESH_MODEL_EXAMPLES=20000 pytest tests/machine/test_machine.py``; 15,000
examples of up to 12 steps are green on this tree. ``RXMESH_MODEL_MUTANT_SEARCH=1`` also runs
the searches for the four bug mutants (minutes).
"""

from __future__ import annotations

from ._machine import EMBEDDED, MeshMachine, run


def test_the_machine_on_the_embedded_store() -> None:
    run(MeshMachine, EMBEDDED)
