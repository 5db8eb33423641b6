"""``rxmesh import DIR --dsn DSN``: bulk-create the nodes described by JSON files, in windows.

Every file under ``DIR`` (recursively, in sorted order) ending ``.json`` or ``.jsonl`` is read:

- ``*.json``: one node object, or a JSON list of node objects (streamed: read an item at a time);
- ``*.jsonl``: JSON lines, one node object per line (blank lines are skipped).

An entry (a line, a list item, a lone object) longer than 8 MiB cannot hold content a store keeps:
it is reported with its file and line, and not loaded. A symbolic link is read only when it leads
to a regular file inside DIR; one leading out of DIR, a link to a directory, a FIFO, a socket or a
device is reported, and not read.

A node object is ``{"path": "...", "node_type": "...", "content": ...}``: ``path`` is required;
at least one of ``node_type`` (a string) and ``content`` (any JSON value) is needed; no other keys.
With ``--partition P`` paths are relative to the partition (``"a/b"`` becomes ``"P/a/b"``).

The files are streamed: ``--window`` nodes are read, checked and sent through
:meth:`rxmesh.Mesh.create_nodes` as one request (one transaction per partition) while the next
window is read, so memory does not grow with the input (but for one path per node read, kept to
name duplicates). An existing node is never overwritten: it is reported "already present", so
running the same import again creates nothing.
Bad entries (invalid JSON, a bad path, a wrong type, an unknown key, a duplicate path, content a
store cannot keep) are reported with their file, line and reason before their window is written,
and do not stop the others (invalid JSON in a ``.json`` list ends that file there, the items before
it are read). If the store cannot be reached, the batch is answered UNAVAILABLE (its
nodes are journaled for one re-issue when ``--journal-dir`` is given) and the rest is not
attempted (a window already sent is answered on its own): re-run the import when the store is
back.

Exit status: 0 everything is created or already present; 1 some entries were refused (fix the
data); 3 the store could not be reached for some entries (re-run the import; takes precedence
over 1); 2 a usage error (no such directory, a bad option).

The layout, in the order an import runs: ``_files`` what the directory holds and what is
refused; ``_json`` each file's entries, within bounds; ``_read`` entries into checked nodes, in
windows; ``_report`` what the import did and its progress bar; this module drives them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from rxmesh.exceptions import ChangeFeedUnverifiedError, NodeValidationError, StoreError
from rxmesh.faults import is_store_unreachable
from rxmesh.importer._read import (
    ImportItem,
    ImportProblem,
    Window,
    check_node,
    count_entries,
    read_stream,
)
from rxmesh.importer._read import (
    read_directory as read_directory,
)
from rxmesh.importer._report import (
    EXIT_OK as EXIT_OK,
)
from rxmesh.importer._report import (
    EXIT_REFUSED as EXIT_REFUSED,
)
from rxmesh.importer._report import EXIT_UNAVAILABLE, EXIT_USAGE, Progress
from rxmesh.importer._report import ImportReport as ImportReport
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh import Mesh
from rxmesh.model import AccessContext, validate_path, validate_user_id
from rxmesh.operations import CreateNodesRequest, CreateNodesResponse, RejectionReason
from rxmesh.providers import Store

__all__ = ["import_directory"]

# Plain text for --help: a Sphinx role (:meth:`x`) is printed as its target's name.
FORMAT_HELP = re.sub(r":\w+:`~?([^`]+)`", r"\1", (__doc__ or "").replace("``", ""))

DEFAULT_IMPORT_WINDOW = 1000
"""Nodes per create_nodes request (and per write transaction)."""

DEFAULT_IMPORT_USER = "importer"
"""The requester of the import's creates unless ``--user`` is given."""

_PAUSE_EVERY = 50
"""Entries read between two turns of the event loop while a window is read: the windows in
flight take their next step meanwhile (an answered existence read goes on to its write), so
the store works while the next window is read, not after."""

_REFUSED_AS_INPUT = frozenset({RejectionReason.INVALID_PATH, RejectionReason.VALIDATION_FAILED})
"""Refusals of a window that may name one bad entry of it: each entry is then checked alone."""


# ---------------------------------------------------------------------------------- importing


async def _answer(mesh: Mesh, request: CreateNodesRequest) -> CreateNodesResponse:
    from rxmesh.aio import first_value

    return await first_value(mesh.create_nodes(request))


def _stopped(report: ImportReport) -> bool:
    """Whether the store was unreachable for a window: nothing more is sent."""
    return bool(report.unavailable or report.partial)


async def import_directory(
    directory: str | os.PathLike[str],
    mesh: Mesh,
    *,
    partition: str | None = None,
    window: int = DEFAULT_IMPORT_WINDOW,
    user: str = DEFAULT_IMPORT_USER,
    progress: Progress | None = None,
) -> ImportReport:
    """Import the nodes described under ``directory`` through ``mesh.create_nodes``.

    The files are read a window at a time; once a window was answered, the next one is sent
    while the one after it is read (at most two requests in flight, answered in order).

    Returns the :class:`ImportReport`; never raises for a refused or unavailable batch (that is
    in the report). Raises ``NotADirectoryError`` for a missing directory.
    """
    started = time.monotonic()
    files, windows = read_stream(
        directory, partition=partition, window=window, pause_every=_PAUSE_EVERY
    )
    journal = mesh.ledger.journal_dir
    report = ImportReport(
        store=mesh.store.name,
        files=files,
        journal_dir=None if journal is None else str(journal),
    )
    if progress is not None and progress.enabled:
        progress.total = count_entries(directory)
    access = AccessContext(user=user)
    sent: deque[tuple[int, Window, asyncio.Task[CreateNodesResponse]]] = deque()
    depth, index, done = 1, 0, 0

    async def settle_oldest() -> None:
        nonlocal depth, done
        number, read, task = sent.popleft()
        response = await task
        if response.success:
            depth = 2  # the store answers: keep the next window in flight while reading
        await _settle_window(report, mesh, access, window, number, read, response)
        done += len(read.nodes)
        if progress is not None:
            progress.update(done)

    try:
        for read in windows:
            if read is None:  # mid-window: let the windows in flight go on (their next step)
                await asyncio.sleep(0)
                continue
            report.items += len(read.nodes) + len(read.problems)
            report.refused.extend(read.problems)
            done += len(read.problems)  # the bar counts entries, as its total does
            if not read.nodes:
                continue
            if _stopped(report):
                report.not_attempted.extend(node.path for node in read.nodes)
                continue
            index += 1
            request = CreateNodesRequest(nodes=tuple(read.nodes), access=access, window=window)
            sent.append((index, read, asyncio.ensure_future(_answer(mesh, request))))
            await asyncio.sleep(0)  # let it reach the store before the next window is read
            while sent and (len(sent) >= depth or _stopped(report)):
                await settle_oldest()
        while sent:
            await settle_oldest()
    finally:
        for _, _, task in sent:  # only when the import itself failed or was cancelled
            task.cancel()
        if sent:
            await asyncio.gather(*(task for _, _, task in sent), return_exceptions=True)
    if progress is not None:
        progress.finish()
    report.seconds = time.monotonic() - started
    return report


async def _settle_window(
    report: ImportReport,
    mesh: Mesh,
    access: AccessContext,
    window: int,
    index: int,
    read: Window,
    response: CreateNodesResponse,
) -> None:
    """Account for one window's answer. A window refused for its input before any write (the
    mesh names its first bad entry only) is checked entry by entry: each bad entry is reported
    with its line, and the rest of the window is sent again."""
    if response.success:  # every entry created or present: none to name
        _settle(report, (), response, index)
        return
    batch = read.items
    refused_as_input = response.rejection_reason in _REFUSED_AS_INPUT
    if refused_as_input and not response.success and not response.created:
        good: list[ImportItem] = []
        for item in batch:
            try:
                check_node(item.node)
            except ValueError as exc:  # NodeValidationError and InvalidPathError are, too
                report.refused.append(ImportProblem(item.file, item.line, str(exc), item.node.path))
            else:
                good.append(item)
        if len(good) < len(batch):
            if not good:
                return
            batch = good
            response = await _answer(
                mesh,
                CreateNodesRequest(
                    nodes=tuple(item.node for item in good), access=access, window=window
                ),
            )
    _settle(report, batch, response, index)


def _settle(
    report: ImportReport, batch: Sequence[ImportItem], response: CreateNodesResponse, index: int
) -> None:
    report.created += len(response.created)
    report.already_present += len(response.already_present)
    if response.success:
        return
    reason = response.rejection_reason or RejectionReason.UNKNOWN
    settled = {n.path for n in response.created} | set(response.already_present)
    rest = [item for item in batch if item.node.path not in settled]
    if response.created:
        report.partial.append(
            f"batch {index}: {len(response.created)} landed, {len(rest)} not created "
            f"({reason.value}): {response.error}"
        )
        report.unavailable.extend(item.node.path for item in rest)
        return
    if reason is RejectionReason.UNAVAILABLE:
        report.unavailable.extend(item.node.path for item in rest)
        return
    for item in rest:
        report.refused.append(
            ImportProblem(item.file, item.line, f"{reason.value}: {response.error}", item.node.path)
        )


# ---------------------------------------------------------------------------------- the CLI


def _window(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 2000:
        raise argparse.ArgumentTypeError(f"--window must be between 1 and 2000, got {value}")
    return value


def _user_id(text: str) -> str:
    """``--user``: refused by argparse (exit 2, naming the option) unless it is a user id."""
    try:
        return validate_user_id(text, field="--user")
    except NodeValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--user: ")) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the import's arguments to ``parser``."""
    parser.add_argument("directory", metavar="DIR", help="directory of .json / .jsonl files")
    parser.add_argument(
        "--dsn",
        required=True,
        help="PostgreSQL DSN (postgresql://user@host:port/db); 'memory://' imports into a "
        "throw-away in-memory store (for demos and tests)",
    )
    parser.add_argument(
        "--listen-dsn",
        help="with --dsn through a transaction pooler (PgBouncer, RDS Proxy, Supavisor): a direct "
        "connection to the server for the change feed's LISTEN (see docs/providers.md)",
    )
    parser.add_argument("--partition", help="paths in the files are relative to this partition")
    parser.add_argument(
        "--window",
        type=_window,
        default=DEFAULT_IMPORT_WINDOW,
        help="nodes per request and write transaction (1..2000, default: %(default)s)",
    )
    parser.add_argument(
        "--user",
        type=_user_id,
        default=DEFAULT_IMPORT_USER,
        help="requester of the creates, a user id ([A-Za-z0-9._-], see docs/requests.md; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--journal-dir",
        help="pending-write journal: UNAVAILABLE creates are kept there for one re-issue "
        "(default: $RXMESH_PENDING_WRITES_DIR, else none)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


async def _main(args: argparse.Namespace) -> int:
    ledger = PendingWriteLedger(args.journal_dir) if args.journal_dir else PendingWriteLedger()
    try:
        return await _import(args, ledger)
    finally:
        ledger.close()


async def _import(args: argparse.Namespace, ledger: PendingWriteLedger) -> int:
    store: Store
    postgres = None
    if args.dsn.startswith("memory:"):
        from rxmesh.providers.memory import InMemoryStore

        store = InMemoryStore()
    else:
        from rxmesh.providers.postgres import PostgresStore

        postgres = PostgresStore(args.dsn, listen_dsn=args.listen_dsn)
        try:
            await postgres.start()
        except ChangeFeedUnverifiedError as exc:  # a pooler without --listen-dsn, say
            print(
                f"rxmesh import: the store refused to start: {exc}; nothing was written\n"
                "rxmesh import: behind a pooler, give the server itself as --listen-dsn",
                file=sys.stderr,
            )
            return 2
        except StoreError as exc:
            if not is_store_unreachable(exc):
                raise
            print(
                f"rxmesh import: the store could not be reached: {exc}; nothing was written",
                file=sys.stderr,
            )
            return EXIT_UNAVAILABLE
        store = postgres
    # Without a journal an UNAVAILABLE create could only be re-issued by this process, which
    # stops sending windows then and exits: nothing is recorded or re-issued, the report says
    # to re-run the import (and the store's change feed announces no commit to a recovery).
    journaled = ledger.journal_dir is not None
    # No partition facts kept between windows: keeping them means watching every commit the
    # change feed announces (an announcement built per row the import writes, to spare one facts
    # read per window); read afresh instead, each window is judged on the facts as they are.
    mesh = Mesh(
        store,
        ledger=ledger,
        record_pending_writes=journaled,
        recover_pending_writes=journaled,
        cache_partition_facts=False,
    )
    try:
        progress = Progress(0, enabled=False if args.no_progress else None)
        report = await import_directory(
            args.directory,
            mesh,
            partition=args.partition,
            window=args.window,
            user=args.user,
            progress=progress,
        )
    finally:
        mesh.dispose()
        if postgres is not None:
            await postgres.close()
    print(report.format())
    return report.exit_status


def run(args: argparse.Namespace) -> int:
    """Run ``rxmesh import`` for parsed ``args``; returns the exit status."""
    if not Path(args.directory).is_dir():
        print(f"rxmesh import: {args.directory} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    if args.partition is not None:
        try:
            validate_path(args.partition, allow_reserved=False)
        except ValueError as exc:
            print(f"rxmesh import: --partition: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if "/" in args.partition:
            print("rxmesh import: --partition must be one path segment", file=sys.stderr)
            return EXIT_USAGE
    return asyncio.run(_main(args))
