"""The durable step has a bound (issue 31 item 6): a journal that stops answering holds no answer.

With ``durable_timeout`` past, a record is answered NOT recorded and rolled back; the late step,
if it ever returns, is taken back (a restore entry in the log, the previous file or none), so no
later process re-issues what its caller was told was not recorded. The disk is made not to
answer by a gate on ``fdatasync``/``fsync`` (deterministic: it stays shut until the test opens
it), with the deadlines injected (they pass when the test says, never by the clock), and by
``fsfreeze`` of a real loop-mounted ext4 when run as root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError
from rxmesh.health import HealthStatus, PendingWritesCheck
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.ledger._writer import Ticket
from rxmesh.operations import Verdict
from tests.ledger._blocking import BOUND, FdatasyncGate
from tests.ledger._fakes import make_intent, reloaded

SHORT = 0.05  # seconds: the gate is shut for longer, however slow the machine


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> FdatasyncGate:
    """Shuts the log's ``fdatasync`` and the format-1 files' ``fsync`` alike."""
    gate = FdatasyncGate()
    monkeypatch.setattr(os, "fdatasync", gate)
    monkeypatch.setattr(os, "fsync", gate)
    return gate


def _every_byte(journal_dir: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(journal_dir.iterdir()))


def _late(ledger: PendingWriteLedger, gate: FdatasyncGate) -> None:
    """The disk answers again: the late step returns (close waits for the writer thread)."""
    gate.open()
    ledger.close()


class Deadlines:
    """Injected time: a record's deadline passes when the test says so, never by the clock.

    An awaited record's deadline is armed (:meth:`PendingWriteLedger._arm_deadline`) and passes
    at :meth:`pass_all`; a synchronous record's passes once the writer is inside its step with
    the gate shut (with the gate open, never).
    """

    def __init__(self, gate: FdatasyncGate) -> None:
        self.gate = gate
        self.armed: list[tuple[PendingWriteLedger, Ticket]] = []

    def arm(
        self, ledger: PendingWriteLedger, loop: object, deadline: float, ticket: Ticket
    ) -> _Unarmed:
        self.armed.append((ledger, ticket))
        return _Unarmed()

    def step_returned(self, ledger: PendingWriteLedger, ticket: Ticket) -> bool:
        if self.gate.is_open:  # the disk answers: the step returns within the bound
            return ticket.done.wait(BOUND)
        if not self.gate.entered.wait(BOUND):
            raise AssertionError("the writer never reached its fsync")
        return False  # the deadline passed while the step was inside the disk

    async def armed_count(self, count: int) -> None:
        async with asyncio.timeout(BOUND):
            # Armed by the record's own task, a step or two away.
            while len(self.armed) < count:  # noqa: ASYNC110
                await asyncio.sleep(0)

    def pass_all(self, start: int = 0) -> None:
        for ledger, ticket in self.armed[start:]:
            ledger._expire_waiter(ticket)


class _Unarmed:
    def cancel(self) -> None:
        pass


@pytest.fixture
def deadlines(gate: FdatasyncGate, monkeypatch: pytest.MonkeyPatch) -> Deadlines:
    deadlines = Deadlines(gate)
    monkeypatch.setattr(
        PendingWriteLedger,
        "_arm_deadline",
        lambda ledger, loop, deadline, ticket: deadlines.arm(ledger, loop, deadline, ticket),
    )
    monkeypatch.setattr(
        PendingWriteLedger,
        "_step_returned",
        lambda ledger, ticket: deadlines.step_returned(ledger, ticket),
    )
    return deadlines


async def test_a_record_past_the_bound_is_answered_not_recorded_and_never_reissued(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines
) -> None:
    """Its entry is written and its fdatasync has not returned when the deadline passes: NOT
    recorded; the late step is taken back. Fails at 1d389e8 because the ledger had no bound
    (no ``durable_timeout``): the record waited for the disk for ever, and once the disk
    answered, the intent was re-issued."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent()))
    await gate.wait_entered()
    await deadlines.armed_count(1)

    deadlines.pass_all()

    async with asyncio.timeout(BOUND):
        with pytest.raises(JournalError, match=r"did not return within 0\.05 s"):
            await task
    assert ledger.pending() == ()
    assert ledger.statistics().durable_timeouts == 1
    health = PendingWritesCheck(ledger)()
    assert health.status is HealthStatus.DEGRADED
    assert "has not returned" in health.description
    _late(ledger, gate)
    assert reloaded(journal_dir) == []  # the late entry was taken back


async def test_a_record_expired_while_queued_is_never_written(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines
) -> None:
    """B waits behind A's group, whose fdatasync hangs; B's deadline passes (not A's): B is NOT
    recorded and never written, A is recorded once the disk answers (its deadline never
    passed: the negative control)."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    gate.close()
    first = asyncio.create_task(ledger.record_durably(make_intent("acme/a", request_id="a")))
    await gate.wait_entered()
    await deadlines.armed_count(1)
    second = asyncio.create_task(ledger.record_durably(make_intent("acme/b", request_id="b")))
    await deadlines.armed_count(2)

    deadlines.pass_all(start=1)

    async with asyncio.timeout(BOUND):
        with pytest.raises(JournalError, match="NOT recorded"):
            await second
        gate.open()
        assert await first is True
    assert [i.path for i in ledger.pending()] == ["acme/a"]
    ledger.close()
    written = await asyncio.to_thread(_every_byte, journal_dir)
    assert b"acme/a" in written
    assert b"acme/b" not in written  # B's group wrote nothing
    assert reloaded(journal_dir) == [("acme/a", "a")]


async def test_a_bulk_past_the_bound_records_none_of_its_nodes(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines
) -> None:
    """Fails at 1d389e8 (no bound: the bulk's answer waited for the disk)."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    gate.close()
    intents = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(600)]
    task = asyncio.create_task(ledger.record_many_durably(intents))
    await gate.wait_entered()
    await deadlines.armed_count(1)

    deadlines.pass_all()

    async with asyncio.timeout(BOUND):
        results = await task
    assert all(isinstance(r, JournalError) for r in results)
    assert ledger.pending() == ()
    _late(ledger, gate)
    assert reloaded(journal_dir) == []


def test_a_synchronous_record_past_the_bound_is_not_recorded(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines
) -> None:
    """Fails at 1d389e8: ``record`` wrote its file on the caller's thread, unbounded."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    gate.close()

    with pytest.raises(JournalError, match="NOT recorded"):
        ledger.record(make_intent())

    assert ledger.pending() == ()
    _late(ledger, gate)
    assert reloaded(journal_dir) == []  # its file, written late, was removed


@pytest.mark.parametrize("durably", [True, False], ids=["log", "file"])
async def test_a_replacement_past_the_bound_leaves_the_replaced_intent_standing(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines, durably: bool
) -> None:
    """The same requester's second record of a path times out: the first intent stays pending,
    is not settled, and is what the next process finds (the late write restored it). Fails at
    1d389e8 (no bound)."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    first = make_intent(request_id="r1")
    settled: list[PendingWriteOutcome] = []
    ledger.outcomes.subscribe(settled.append)
    if durably:
        assert await ledger.record_durably(first) is True
    else:
        assert await asyncio.to_thread(ledger.record, first) is True
    gate.close()

    second = make_intent(request_id="r2")
    async with asyncio.timeout(BOUND):
        if durably:
            task = asyncio.create_task(ledger.record_durably(second))
            await gate.wait_entered()
            await deadlines.armed_count(2)
            deadlines.pass_all(start=1)
            with pytest.raises(JournalError, match="NOT recorded"):
                await task
        else:
            with pytest.raises(JournalError, match="NOT recorded"):
                await asyncio.to_thread(ledger.record, second)

    assert [i.request_id for i in ledger.pending()] == ["r1"]
    assert settled == []  # r1 was not superseded by what was not recorded
    _late(ledger, gate)
    assert reloaded(journal_dir) == [("acme/docs/readme", "r1")]


async def test_an_intent_settled_while_its_replacement_timed_out_is_not_reissued(
    journal_dir: Path, gate: FdatasyncGate, deadlines: Deadlines
) -> None:
    """r1 is taken and settled while r2's step hangs and expires: once the step returns, the
    path holds nothing on disk (neither r2, told NOT recorded, nor the settled r1)."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    assert await ledger.record_durably(make_intent(request_id="r1")) is True
    (taken,) = ledger.take_all()
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent(request_id="r2")))
    await gate.wait_entered()
    await deadlines.armed_count(2)

    deadlines.pass_all(start=1)

    async with asyncio.timeout(BOUND):
        with pytest.raises(JournalError, match="NOT recorded"):
            await task
    ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    _late(ledger, gate)
    assert reloaded(journal_dir) == []


async def test_the_deadline_is_armed_on_the_loop_clock(
    journal_dir: Path, gate: FdatasyncGate
) -> None:
    """Without injected time: the real deadline fires and answers (whether the writer had
    written the entry by then or not, the end is the same: NOT recorded, nothing reloaded)."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=SHORT)
    gate.close()

    async with asyncio.timeout(BOUND):
        with pytest.raises(JournalError, match="NOT recorded"):
            await ledger.record_durably(make_intent())

    _late(ledger, gate)
    assert reloaded(journal_dir) == []


# -- negative controls ----------------------------------------------------------------------------


async def test_a_durable_step_within_the_bound_still_records(
    journal_dir: Path, gate: FdatasyncGate
) -> None:
    """The negative control: the disk is slow (the gate shut until the writer is inside its
    fdatasync) but answers within the bound; the intent is recorded, and reloaded."""
    ledger = PendingWriteLedger(journal_dir, durable_timeout=BOUND)
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent()))
    await gate.wait_entered()
    gate.open()

    async with asyncio.timeout(BOUND):
        assert await task is True

    assert ledger.statistics().durable_timeouts == 0
    assert ledger.statistics().journal_fault is None
    ledger.close()
    assert reloaded(journal_dir) == [("acme/docs/readme", "req-1")]


def test_a_synchronous_record_within_the_bound_still_records(
    journal_dir: Path, gate: FdatasyncGate
) -> None:
    """The negative control of the synchronous record: an open gate, the default bound."""
    ledger = PendingWriteLedger(journal_dir)
    assert ledger.record(make_intent()) is True
    ledger.close()
    assert reloaded(journal_dir) == [("acme/docs/readme", "req-1")]


@pytest.mark.parametrize("bound", [0, -1, float("inf"), float("nan"), "2"])
def test_the_bound_must_be_a_positive_number_of_seconds(journal_dir: Path, bound: object) -> None:
    with pytest.raises(ValueError, match="durable_timeout"):
        PendingWriteLedger(journal_dir, durable_timeout=bound)  # type: ignore[arg-type]


# -- a real file system that stops answering ------------------------------------------------------


def _frozen_fs_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "fsfreeze and mount -o loop need root"
    for tool in ("fsfreeze", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _fsfreeze(flag: str, mount: Path) -> None:
    subprocess.run(["fsfreeze", flag, str(mount)], check=True, timeout=60)


@pytest.fixture
def frozen_capable_dir() -> Iterator[Path]:
    """A fresh ext4 on a loop device, mounted on a temp dir; unmounted (and thawed) after."""
    why = _frozen_fs_unavailable()
    if why is not None:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="rxmesh-freeze-"))
    image, mount = base / "fs.img", base / "mnt"
    mount.mkdir()
    with image.open("wb") as f:
        f.truncate(32 * 1024 * 1024)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, timeout=60)
    done = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, timeout=60
    )
    if done.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot loop-mount a file system here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["fsfreeze", "-u", str(mount)], capture_output=True, timeout=60)
        subprocess.run(["umount", str(mount)], check=True, timeout=60)
        shutil.rmtree(base)


async def test_a_frozen_file_system_answers_every_record_within_the_bound(
    frozen_capable_dir: Path,
) -> None:
    """21 records on a frozen ext4 are all answered NOT recorded within the bound; thawed,
    the late step is taken back and a new ledger finds only what was recorded before. Fails at
    1d389e8: 0 of 21 were answered while frozen (no bound)."""
    journal_dir = frozen_capable_dir / "journal"
    ledger = PendingWriteLedger(journal_dir, durable_timeout=0.5)
    try:
        assert await ledger.record_durably(make_intent("acme/before", request_id="r0")) is True
        await asyncio.to_thread(_fsfreeze, "-f", frozen_capable_dir)
        try:
            records = [
                ledger.record_durably(make_intent(f"acme/frozen/{i}", request_id=f"f{i}"))
                for i in range(21)
            ]
            async with asyncio.timeout(BOUND):
                results = await asyncio.gather(*records, return_exceptions=True)
            assert all(isinstance(r, JournalError) for r in results), results
            assert "has not returned" in (ledger.journal_fault or "")
        finally:
            await asyncio.to_thread(_fsfreeze, "-u", frozen_capable_dir)
    finally:
        ledger.close()  # the late step returns once thawed; it is taken back
    assert reloaded(journal_dir) == [("acme/before", "r0")]
