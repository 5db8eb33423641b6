"""``rxmesh drill``: an outage drill showing, in seconds, what rxmesh does when its store goes away.

The drill starts a mesh with a pending-write journal, a live record census (a standing watch over
the NodeType records, re-opened after a transient fault) and a health registry; creates nodes;
makes the store unreachable; shows creates answered UNAVAILABLE and journaled, the census
re-opening and health DEGRADED with the reason; brings the store back; shows the evidence (a
declared change-feed gap), the re-issues and their verdicts, health HEALTHY again; and ends with a
table of invariants. It passes (exit status 0) only if every invariant holds.

Two stores:

- the embedded one (default): ``FaultInjectingStore(InMemoryStore())``; the outage refuses every
  read and write as unreachable and drops the change feed; the restore declares a gap.
- PostgreSQL (``dsn=``): the drill starts a loopback :class:`~rxmesh.testing.FaultProxy` in front
  of the given server and talks to it through the proxy; the outage makes the proxy refuse new
  connections and reset every open one; the restore listens again, and the store's own change-feed
  listener declares the gap when it is back. The drill never stops a server; it uses its own
  schemas (a fresh prefix per run) and drops them at the end. Behind a transaction-pooling proxy
  (PgBouncer, RDS Proxy, Supavisor) pass ``listen_dsn=`` a direct connection to the server (the
  store's change feed refuses to start without it); the drill puts a second proxy in front of it
  and cuts both.

In both, the drill also ends the census's open live query with a connection reset (a DB frame
from ``ConnectionResetError(104)``), as a live query reading over the cut connection sees it.

The retry ladder and re-open backoff are shortened (parameters) so the drill takes seconds; the
text output states the library's real defaults next to them.

The package:

- :mod:`rxmesh.drill.invariants`: the invariants as pure functions, the drill's accounting
  (:class:`DrillAccounting`) in, :class:`Invariant` verdicts out; no store, no clock.
- ``_drill`` (the session: mesh, journal, census, health, the tracked creates), ``_runner`` (the
  script, :func:`run_drill`), ``_timeline`` (events, text and JSON lines) and ``_cli`` (the
  options of ``rxmesh drill``, :func:`run`, :func:`main`).
- The ways of cutting the store and restoring it are :mod:`rxmesh.testing`'s public backends
  (:class:`~rxmesh.testing.InMemoryOutage`, :class:`~rxmesh.testing.PostgresProxyOutage`), reusable
  in tests of your own.

Imports: the drill needs a cut backend, and those are test helpers, so it imports
:mod:`rxmesh.testing` lazily, in the one function that builds the backend when a run starts;
importing :mod:`rxmesh.drill` or :mod:`rxmesh.cli` loads no test helper, and nothing under
``rxmesh/`` imports from ``tests/``.

Example:
    >>> import asyncio, io
    >>> result = asyncio.run(run_drill(out=io.StringIO()))  # doctest: +SKIP
    >>> result.ok  # doctest: +SKIP
    True
"""

from __future__ import annotations

# ``rxmesh drill``'s options and runner, for rxmesh.cli; users run the command or run_drill,
# so they stay out of __all__.
from rxmesh.drill._cli import add_arguments as add_arguments
from rxmesh.drill._cli import run as run
from rxmesh.drill._drill import SABOTAGES as SABOTAGES
from rxmesh.drill._runner import run_drill
from rxmesh.drill._timeline import DrillResult as DrillResult
from rxmesh.drill.invariants import (
    DrillAccounting as DrillAccounting,
)
from rxmesh.drill.invariants import (
    Invariant as Invariant,
)
from rxmesh.drill.invariants import (
    RequestAccount as RequestAccount,
)
from rxmesh.drill.invariants import (
    check_invariants as check_invariants,
)

# DrillSetupError's home is rxmesh.exceptions; this import keeps ``from rxmesh.drill import ...``
# working, outside __all__.
from rxmesh.exceptions import DrillSetupError as DrillSetupError

__all__ = ["run_drill"]
