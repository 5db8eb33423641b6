"""The drill's command-line glue: ``rxmesh drill``'s options and its exit status."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from rxmesh.drill._drill import SABOTAGES
from rxmesh.drill._runner import run_drill
from rxmesh.exceptions import ChangeFeedUnverifiedError, DrillSetupError, StoreError
from rxmesh.faults import is_store_unreachable

__all__ = ["add_arguments", "run"]

_SCHEMES = ("postgresql://", "postgres://")


def _why_not_begun(cause: BaseException) -> str:
    """One line: why the drill could not begin (exit status 2, not "an invariant broke")."""
    text = " ".join(str(cause).split()) or type(cause).__name__
    if isinstance(cause, StoreError) and is_store_unreachable(cause):
        return f"the store could not be reached before the drill began: {text}"
    if isinstance(cause, ChangeFeedUnverifiedError):  # a pooler without --listen-dsn, say
        return (
            f"the store refused to start: {text} "
            "(behind a pooler, give the server itself as --listen-dsn)"
        )
    return f"the drill could not begin: {type(cause).__name__}: {text}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the drill's options to ``parser`` (used by ``rxmesh drill``)."""
    parser.add_argument(
        "--dsn",
        help="run against this PostgreSQL server (through a loopback fault proxy the drill "
        "starts; the server itself is never stopped). Default: the embedded in-memory store.",
    )
    parser.add_argument(
        "--listen-dsn",
        help="with --dsn through a transaction pooler (PgBouncer, RDS Proxy, Supavisor): a "
        "direct connection to the server for the change feed's LISTEN (the drill cuts it too)",
    )
    parser.add_argument(
        "--journal-dir", help="pending-write journal directory (default: a temporary one)"
    )
    parser.add_argument("--json", action="store_true", help="write JSON lines, one per event")
    parser.add_argument(
        "--nodes", type=int, default=3, help="nodes created before the outage (default: 3)"
    )
    parser.add_argument(
        "--outage-creates",
        type=int,
        default=3,
        help="creates attempted during the outage (default: 3)",
    )
    parser.add_argument(
        "--timeout", type=float, default=15.0, help="bound of every wait, seconds (default: 15)"
    )
    parser.add_argument(
        "--sabotage",
        choices=SABOTAGES,
        help="inject a broken invariant (to see the drill fail with exit status 1)",
    )
    parser.add_argument(
        "--show-log",
        action="store_true",
        help="also show rxmesh's own log on stderr (off by default: the timeline says it)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the drill for parsed ``args``; returns the exit status: 0 every invariant holds, 1 one
    broke, 2 the drill could not begin (a bad DSN, a missing database or role, a server that does
    not answer), said in one line on stderr.

    rxmesh's own logging is left as the caller set it (the ``rxmesh`` CLI shows it only with
    ``--show-log``); without ``--show-log``, asyncpg's pool warnings (printed by Python's
    last-resort handler while the drill's outage lasts) are silenced too.
    """
    if not args.show_log:
        logging.getLogger("asyncpg").addHandler(logging.NullHandler())
    for option, dsn in (("--dsn", args.dsn), ("--listen-dsn", args.listen_dsn)):
        if dsn is not None and not dsn.startswith(_SCHEMES):
            scheme = dsn.partition("://")[0] if "://" in dsn else dsn[:20]
            print(
                f"rxmesh drill: {option} must be a PostgreSQL DSN (postgresql://...), "
                f"got {scheme!r}",
                file=sys.stderr,
            )
            return 2
    try:
        result = asyncio.run(
            run_drill(
                dsn=args.dsn,
                listen_dsn=args.listen_dsn,
                journal_dir=args.journal_dir,
                nodes=args.nodes,
                outage_creates=args.outage_creates,
                timeout=args.timeout,
                sabotage=args.sabotage,
                out=sys.stdout,
                json_lines=args.json,
            )
        )
    except DrillSetupError as exc:
        print(f"rxmesh drill: {_why_not_begun(exc.__cause__ or exc)}", file=sys.stderr)
        return 2
    except StoreError as exc:
        if not (is_store_unreachable(exc) or isinstance(exc, ChangeFeedUnverifiedError)):
            raise
        print(f"rxmesh drill: {_why_not_begun(exc)}", file=sys.stderr)
        return 2
    return result.exit_status
