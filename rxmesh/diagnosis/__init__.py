"""Honest diagnosis: whose side stalled when the store could not be reached.

A connect timeout is wall-clock; it fires just the same when this process stalled (a blocked event
loop, a long GC pause). So:

- :class:`LoopStallMonitor` ticks on the event loop and records stalls (WARNING "event loop stalled
  for 3.2 s (gc 0.4 s)", ``extra.event == "loop_stall"``);
- :func:`stall_adjacency` answers "did a stall end within the 5 s shadow before now?", and
  :func:`report_store_unreachable` logs every store-unreachable fault at ERROR with that answer
  appended ("this process's event loop stalled 3.2 s, ending 0.3 s before this fault — check this
  process before the database") and bound as fields;
- :func:`triage` (``python -m rxmesh triage LOG``) reads a serialized loguru log and says whether
  the timeouts cluster after stalls or are spread evenly.

The log field names (``event``, ``store_unreachable``, ``loop_stall``, ``stall_seconds``, ...) are
a contract with every log already written; see docs/diagnosis.md.

The layout: ``_monitor`` the stall monitor; ``_adjacency`` asks whether a stall ended just
before a fault; ``_triage`` reads a log back and clusters its faults after stalls; ``_fields``
the field names and defaults the other three write and read.
"""

from __future__ import annotations

from rxmesh.diagnosis._adjacency import StallAdjacency as StallAdjacency
from rxmesh.diagnosis._adjacency import StoreUnreachableReport as StoreUnreachableReport
from rxmesh.diagnosis._adjacency import (
    report_store_unreachable,
    stall_adjacency,
    with_stall_adjacency,
)

# The command line's triage shows these two defaults in its help.
from rxmesh.diagnosis._fields import DEFAULT_ADJACENT_SECONDS as DEFAULT_ADJACENT_SECONDS
from rxmesh.diagnosis._fields import DEFAULT_SHADOW_SECONDS as DEFAULT_SHADOW_SECONDS

# The log's field names, for the mesh's terminal arm that binds them; users match the strings
# (docs/diagnosis.md), so they stay out of __all__.
from rxmesh.diagnosis._fields import EVENT_STORE_UNREACHABLE as EVENT_STORE_UNREACHABLE
from rxmesh.diagnosis._fields import FIELD_EVENT as FIELD_EVENT
from rxmesh.diagnosis._monitor import LoopStallMonitor
from rxmesh.diagnosis._monitor import LoopStallStatistics as LoopStallStatistics
from rxmesh.diagnosis._triage import TriageReport as TriageReport
from rxmesh.diagnosis._triage import format_triage as format_triage
from rxmesh.diagnosis._triage import triage

__all__ = [
    "LoopStallMonitor",
    "report_store_unreachable",
    "stall_adjacency",
    "triage",
    "with_stall_adjacency",
]
