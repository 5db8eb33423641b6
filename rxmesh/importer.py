"""``rxmesh import DIR --dsn DSN``: bulk-create the nodes described by JSON files, in windows.

Every file under ``DIR`` (recursively, in sorted order) ending ``.json`` or ``.jsonl`` is read:

- ``*.json``: ONE node object, or a JSON list of node objects;
- ``*.jsonl``: JSON lines, one node object per line (blank lines are skipped).

A node object is ``{"path": "...", "node_type": "...", "content": ...}``: ``path`` is required;
at least one of ``node_type`` (a string) and ``content`` (any JSON value) is needed; no other keys.
With ``--partition P`` paths are relative to the partition (``"a/b"`` becomes ``"P/a/b"``).

Nodes go through :meth:`rxmesh.Mesh.create_nodes` in requests of ``--window`` nodes (each one
transaction per partition). An existing node is never overwritten: it is reported "already
present", so running the same import again creates nothing. Bad entries (invalid JSON, a bad path,
a wrong type, an unknown key, a duplicate path) are reported with their file, line and reason and
do not stop the others. If the store cannot be reached, the batch is answered UNAVAILABLE (its
nodes are journaled for one re-issue when ``--journal-dir`` is given) and the rest is not
attempted: re-run the import when the store is back.

Exit status: 0 everything is created or already present; 1 some entries were refused (fix the
data); 3 the store could not be reached for some entries (re-run the import; takes precedence
over 1); 2 a usage error (no such directory, a bad option).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from rxmesh.exceptions import ChangeFeedUnverifiedError, NodeValidationError, StoreError
from rxmesh.faults import is_store_unreachable
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh import Mesh
from rxmesh.model import (
    MAX_CONTENT_BYTES,
    AccessContext,
    MeshNode,
    validate_path,
    validate_user_id,
)
from rxmesh.operations import CreateNodesRequest, CreateNodesResponse, RejectionReason
from rxmesh.providers import Store

__all__ = [
    "DEFAULT_IMPORT_USER",
    "DEFAULT_IMPORT_WINDOW",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "FORMAT_HELP",
    "ImportItem",
    "ImportProblem",
    "ImportReport",
    "Progress",
    "add_arguments",
    "import_directory",
    "read_directory",
    "run",
]

FORMAT_HELP = (__doc__ or "").replace("``", "")

DEFAULT_IMPORT_WINDOW = 1000
"""Nodes per create_nodes request (and per write transaction)."""

DEFAULT_IMPORT_USER = "importer"
"""The requester of the import's creates unless ``--user`` is given."""

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

_KEYS = frozenset({"path", "node_type", "content"})


@dataclass(frozen=True, slots=True)
class ImportItem:
    """One node to import and where it was read (``line`` is 1-based)."""

    node: MeshNode
    file: str
    line: int | None


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """An entry that was not imported: where it is and why."""

    file: str
    line: int | None
    reason: str
    path: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.reason}"


@dataclass
class ImportReport:
    """What an import did. ``exit_status`` follows the module docstring."""

    store: str
    files: int = 0
    items: int = 0
    created: int = 0
    already_present: int = 0
    refused: list[ImportProblem] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    not_attempted: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    journal_dir: str | None = None
    seconds: float = 0.0

    @property
    def exit_status(self) -> int:
        """0 all created or present; 3 store unreachable for some; else 1 if any refused."""
        if self.unavailable or self.not_attempted or self.partial:
            return EXIT_UNAVAILABLE
        return EXIT_REFUSED if self.refused else EXIT_OK

    def format(self) -> str:
        """The report as text for a person."""
        rate = self.items / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"rxmesh import: {self.items} entries from {self.files} file(s) into {self.store} "
            f"in {self.seconds:.2f}s ({rate:,.0f}/s)",
            f"  created           {self.created}",
            f"  already present   {self.already_present}",
            f"  refused           {len(self.refused)}",
        ]
        lines += [f"    {problem}" for problem in self.refused[:50]]
        if len(self.refused) > 50:
            lines.append(f"    ... and {len(self.refused) - 50} more")
        where = (
            f"journaled for one re-issue in {self.journal_dir}"
            if self.journal_dir
            else "NOT journaled (no --journal-dir): re-run the import"
        )
        lines.append(
            f"  unavailable       {len(self.unavailable)}"
            + (
                f"  (the store could not be reached; nothing written; {where})"
                if self.unavailable
                else ""
            )
        )
        lines.append(
            f"  not attempted     {len(self.not_attempted)}"
            + (
                "  (after the store was unreachable; re-run the import)"
                if self.not_attempted
                else ""
            )
        )
        lines.append(f"  partial landings  {len(self.partial)}")
        lines += [f"    {text}" for text in self.partial]
        verdict = {
            EXIT_OK: "everything is in the store",
            EXIT_REFUSED: "some entries were refused: fix them and re-run (the rest is in)",
            EXIT_UNAVAILABLE: "the store could not be reached for some entries: re-run the import",
        }[self.exit_status]
        lines.append(f"exit status {self.exit_status}: {verdict}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- reading


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _elements(text: str) -> Iterator[tuple[int, object]]:
    """The top-level value of a JSON text (already known valid) with its line; a list's items
    each with their own line."""
    decoder = json.JSONDecoder()
    start = len(text) - len(text.lstrip())
    if not text.startswith("[", start):
        value, _ = decoder.raw_decode(text, start)
        yield _line_of(text, start), value
        return
    index = start + 1
    while True:
        while index < len(text) and text[index] in " \t\r\n,":
            index += 1
        if index >= len(text) or text[index] == "]":
            return
        value, end = decoder.raw_decode(text, index)
        yield _line_of(text, index), value
        index = end


class _BadEntry(ValueError):
    """An entry that does not describe a node (the reason is the message)."""


def _node(value: object, partition: str | None) -> MeshNode:
    """Build the node an entry describes; raises ValueError with the reason."""
    if not isinstance(value, dict):
        raise _BadEntry(f"expected a node object, got {type(value).__name__}")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: path, node_type, content"
        )
    path = value.get("path")
    if not isinstance(path, str):
        raise _BadEntry("'path' is required and must be a string")
    full = f"{partition}/{path}" if partition else path
    validate_path(full, allow_reserved=False)
    node_type = value.get("node_type")
    if node_type is not None and not isinstance(node_type, str):
        raise _BadEntry(f"'node_type' must be a string, got {type(node_type).__name__}")
    content = value.get("content")
    if node_type is None and content is None:
        raise ValueError(f"node '{full}' has neither a node_type nor content")
    if content is not None:
        size = len(json.dumps(content, ensure_ascii=False).encode())
        if size > MAX_CONTENT_BYTES:
            raise ValueError(f"content is {size} bytes; at most {MAX_CONTENT_BYTES}")
    try:
        return MeshNode(path=full, node_type=node_type, content=content)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'node'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ValueError(problems) from exc


def _entries(path: Path, shown: str) -> Iterator[tuple[int | None, object] | ImportProblem]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield ImportProblem(shown, None, f"cannot read: {exc}")
        return
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                yield ImportProblem(shown, number, f"invalid JSON: {exc.msg} (column {exc.colno})")
        return
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        yield ImportProblem(shown, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})")
        return
    yield from _elements(text)


def read_directory(
    directory: str | os.PathLike[str], *, partition: str | None = None
) -> tuple[list[ImportItem], list[ImportProblem], int]:
    """Read every ``*.json`` / ``*.jsonl`` file under ``directory``.

    Returns:
        the nodes to import (in file order), the problems found (file, line, reason), and the
        number of files read. A duplicate path is a problem naming the first occurrence.

    Raises:
        NotADirectoryError: ``directory`` is not a directory.
        InvalidPathError: ``partition`` is not a valid partition name.
    """
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    if partition is not None:
        validate_path(partition, allow_reserved=False)
        if "/" in partition:
            raise ValueError(f"--partition {partition!r} must be one segment")
    items: list[ImportItem] = []
    problems: list[ImportProblem] = []
    first_seen: dict[str, str] = {}
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".json", ".jsonl"})
    for file in files:
        shown = str(file.relative_to(root))
        for entry in _entries(file, shown):
            if isinstance(entry, ImportProblem):
                problems.append(entry)
                continue
            line, value = entry
            try:
                node = _node(value, partition)
            except ValueError as exc:  # InvalidPathError is a ValueError too
                problems.append(ImportProblem(shown, line, str(exc)))
                continue
            where = shown if line is None else f"{shown}:{line}"
            earlier = first_seen.get(node.path)
            if earlier is not None:
                problems.append(
                    ImportProblem(
                        shown, line, f"duplicate path '{node.path}' (first at {earlier})", node.path
                    )
                )
                continue
            first_seen[node.path] = where
            items.append(ImportItem(node, shown, line))
    return items, problems, len(files)


# ---------------------------------------------------------------------------------- progress


class Progress:
    """A plain-text progress bar on a stream, redrawn with ``\\r`` (items, rate, ETA).

    Disabled (draws nothing) when ``enabled`` is false; by default it is enabled only when the
    stream is a TTY.
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 30,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self._start = time.monotonic()
        self._drawn = 0.0
        self.done = 0

    def line(self, done: int) -> str:
        """The bar's text for ``done`` items."""
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = done / elapsed
        share = done / self.total if self.total else 1.0
        filled = int(self.width * share)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        eta_text = f"{eta:.0f}s" if eta != float("inf") else "?"
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {done}/{self.total} items  {rate:,.0f}/s  ETA {eta_text}"

    def update(self, done: int) -> None:
        """Record progress; redraws at most ten times a second (and at the end)."""
        self.done = done
        now = time.monotonic()
        if not self.enabled or (now - self._drawn < 0.1 and done < self.total):
            return
        self._drawn = now
        self.stream.write("\r" + self.line(done))
        self.stream.flush()

    def finish(self) -> None:
        """End the bar's line."""
        if self.enabled:
            self.stream.write("\r" + self.line(self.done) + "\n")
            self.stream.flush()


# ---------------------------------------------------------------------------------- importing


async def _answer(mesh: Mesh, request: CreateNodesRequest) -> CreateNodesResponse:
    from rxmesh.aio import first_value

    return await first_value(mesh.create_nodes(request))


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

    Returns the :class:`ImportReport`; never raises for a refused or unavailable batch (that is
    in the report). Raises ``NotADirectoryError`` for a missing directory.
    """
    started = time.monotonic()
    items, problems, files = read_directory(directory, partition=partition)
    journal = mesh.ledger.journal_dir
    report = ImportReport(
        store=mesh.store.name,
        files=files,
        items=len(items) + len(problems),
        refused=list(problems),
        journal_dir=None if journal is None else str(journal),
    )
    if progress is not None:
        progress.total = len(items)
    access = AccessContext(user=user)
    done = 0
    for offset in range(0, len(items), window):
        batch = items[offset : offset + window]
        if report.unavailable or report.partial:
            report.not_attempted.extend(item.node.path for item in batch)
            continue
        request = CreateNodesRequest(
            nodes=tuple(item.node for item in batch), access=access, window=window
        )
        _settle(report, batch, await _answer(mesh, request), offset // window + 1)
        done += len(batch)
        if progress is not None:
            progress.update(done)
    if progress is not None:
        progress.finish()
    report.seconds = time.monotonic() - started
    return report


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
    ledger = PendingWriteLedger(args.journal_dir) if args.journal_dir else None
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
    mesh = Mesh(store, ledger=ledger)
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
