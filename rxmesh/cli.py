"""The ``rxmesh`` command line: ``python -m rxmesh <command> ...`` or the ``rxmesh`` script.

Each subcommand is one function that registers its parser and sets ``run`` (a function of the
parsed namespace returning the exit code); ``_COMMANDS`` lists them (``drill``, ``import``,
``triage``). To add a command, write ``_add_<name>(subparsers)`` and append it to ``_COMMANDS``.

The CLI is an application, so it enables rxmesh's logging (``logger.enable("rxmesh")``) and adds a
stderr sink for rxmesh records while it runs; both are undone when :func:`main` returns.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeAlias

from loguru import logger

from rxmesh.diagnosis import (
    DEFAULT_ADJACENT_SECONDS,
    DEFAULT_SHADOW_SECONDS,
    format_triage,
    triage,
)

__all__: list[str] = []

_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What a subcommand's registration function receives."""


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {text!r}")
    return value


def _run_triage(args: argparse.Namespace) -> int:
    path: str = args.log
    shadow: float = args.shadow
    adjacent: float = args.adjacent
    if path == "-":
        report = triage(sys.stdin, shadow=shadow, adjacent=adjacent)
    else:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                report = triage(handle, shadow=shadow, adjacent=adjacent)
        except OSError as exc:
            print(f"rxmesh triage: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print(format_triage(report))
    return 0


def _add_triage(subparsers: _Subparsers) -> None:
    """``triage LOG [--shadow 5] [--adjacent 0.1]``: do timeouts cluster after loop stalls?"""
    parser = subparsers.add_parser(
        "triage",
        help="read a serialized loguru log: do store-unreachable events follow loop stalls?",
        description=(
            "Reads a JSON-lines log as loguru writes it with serialize=True and prints the window, "
            "the store-unreachable events and loop stalls, the share of events right after a "
            "stall and within its shadow, the share of time the shadows cover, the enrichment, "
            "and a one-line reading. See docs/diagnosis.md."
        ),
    )
    parser.add_argument("log", metavar="LOG", help="the log file ('-' for standard input)")
    parser.add_argument(
        "--shadow",
        type=_non_negative,
        default=DEFAULT_SHADOW_SECONDS,
        help="seconds after a stall's end that still count as its shadow (default: %(default)s)",
    )
    parser.add_argument(
        "--adjacent",
        type=_non_negative,
        default=DEFAULT_ADJACENT_SECONDS,
        help="seconds after a stall's end that count as right after it (default: %(default)s)",
    )
    parser.set_defaults(run=_run_triage)


def _run_drill(args: argparse.Namespace) -> int:
    from rxmesh.drill import run

    if not args.show_log:
        logger.disable("rxmesh")  # the timeline says it; main() disables it again on the way out
    return run(args)


def _add_drill(subparsers: _Subparsers) -> None:
    """``drill [--dsn DSN] [--json] [--journal-dir D] ...``: the outage drill (rxmesh.drill)."""
    from rxmesh.drill import add_arguments

    parser = subparsers.add_parser(
        "drill",
        help="run an outage drill: creates answered UNAVAILABLE, journaled, re-issued on evidence",
        description=(
            "Starts a mesh with a pending-write journal, a live record census and health; makes "
            "the store unreachable; shows the answers, the journal, the census re-opening and "
            "health DEGRADED; brings the store back; shows the evidence, the re-issues and their "
            "verdicts; ends with a table of invariants. Exit status 0 only if all hold. Runs on "
            "the embedded store with no set-up, or against PostgreSQL with --dsn (through a "
            "loopback fault proxy it starts; it never stops a server)."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(run=_run_drill)


def _run_import(args: argparse.Namespace) -> int:
    from rxmesh.importer import run

    return run(args)


def _add_import(subparsers: _Subparsers) -> None:
    """``import DIR --dsn DSN ...``: bulk-create the nodes described by JSON files (importer)."""
    from rxmesh.importer import FORMAT_HELP, add_arguments

    parser = subparsers.add_parser(
        "import",
        help="bulk-create the nodes described by the JSON / JSON-lines files under a directory",
        description=FORMAT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(run=_run_import)


_COMMANDS: tuple[Callable[[_Subparsers], None], ...] = (_add_drill, _add_import, _add_triage)
"""The subcommands' registration functions, in the order ``--help`` lists them."""


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. With ``argv`` naming one command (and no ``-h`` before it), only that
    command is registered: building another's arguments imports its module (the drill imports
    most of rxmesh), a cost an ``rxmesh import`` of a large file should not pay at start-up."""
    parser = argparse.ArgumentParser(
        prog="rxmesh", description="rxmesh tools: diagnosis, drills, imports."
    )
    parser.add_argument(
        "--log-level", default="INFO", help="level of rxmesh's own log on stderr (default: INFO)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _command_in(argv)
    for register in _COMMANDS:
        if chosen is None or register.__name__ == f"_add_{chosen}":
            register(subparsers)
    return parser


def _command_in(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names, if it names one of ours before any help flag, else ``None``."""
    names = {register.__name__.removeprefix("_add_") for register in _COMMANDS}
    words = list(sys.argv[1:] if argv is None else argv)
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-h", "--help"):
            return None
        if word == "--log-level":
            index += 2
            continue
        if word.startswith("--log-level="):
            index += 1
            continue
        return word if word in names else None
    return None


@contextmanager
def _logging(level: str) -> Iterator[None]:
    logger.enable("rxmesh")
    sink = logger.add(sys.stderr, level=level.upper(), filter="rxmesh", format="{level}: {message}")
    try:
        yield
    finally:
        logger.remove(sink)
        logger.disable("rxmesh")


def run() -> None:
    """The process entry point (``rxmesh`` and ``python -m rxmesh``).

    The CLI owns its process, so it drops loguru's default stderr handler (which would print every
    rxmesh line a second time next to the CLI's own sink) before running :func:`main`, and
    freezes what start-up allocated (:func:`main`'s ``freeze``).
    """
    logger.remove()
    raise SystemExit(main(freeze=True))


def main(argv: Sequence[str] | None = None, *, freeze: bool = False) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    ``freeze``: once the command's modules are imported, move every object allocated so far out
    of the cyclic collector's reach (:func:`gc.freeze`; they live as long as the process anyway),
    so its full collections during a long command (an import allocates per node) scan only what
    the command made (docs/performance.md measures it). For a process the CLI owns (:func:`run`);
    a caller's own process is left alone.
    """
    args = _parser(argv).parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    if freeze:
        gc.freeze()
    with _logging(args.log_level):
        return run(args)
