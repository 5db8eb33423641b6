"""The pre-warm sweep: claim the build, then bake every NodeType record at boot.

:meth:`PreWarmer.run`:

1. With a hub, the build-claim handshake to ``admin/build``
   (:func:`rxmesh.messaging.claim_build`, which retries "no answer in time" with
   :func:`~rxmesh.messaging.retry_unreachable_coordination`). If the coordinator answers, it
   decides (``granted``). If every attempt got no answer in time, the durable witness decides:
   GO proceeds with a WARNING, NO-GO re-raises the
   :class:`~rxmesh.exceptions.BuildCoordinationUnreachableError`, UNDETERMINED decides locally —
   by default: PROCEED (baking is local and idempotent; refusing to bake would leave a strict
   registry refusing every typed create). A claim held by another holder skips the sweep (WARNING);
   the census still bakes on its first reading.
2. One one-shot read of every NodeType record (the Initial frame of the NodeType query, behind the
   retry ladder), baked into the registry with :meth:`NodeTypeRegistry.bake_all`.

:class:`StoreBuildWitness` is the durable witness kept in the store: a node at
``system/_build/<fingerprint>`` whose content is ``{"verdict": "GO" | "NO-GO"}``. No node is
UNDETERMINED; a read that fails propagates (a failed read is not an absent record).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from loguru import logger
from reactivex import Observable, abc

from rxmesh.aio import first_value
from rxmesh.exceptions import BuildCoordinationUnreachableError, MalformedWitnessRecordError
from rxmesh.mesh import Mesh
from rxmesh.messaging import (
    DEFAULT_COORDINATION_ATTEMPTS,
    DEFAULT_COORDINATION_BACKOFF,
    DEFAULT_REQUEST_TIMEOUT,
    BuildDecision,
    BuildWitness,
    LocalDecision,
    MessageHub,
    WitnessVerdict,
    claim_build,
)
from rxmesh.model import (
    MAX_SEGMENT_LENGTH,
    FrameKind,
    MeshNode,
    NodeQuery,
    QueryFrame,
)
from rxmesh.nodetypes import NodeTypeRegistry, RegistryChange
from rxmesh.operators import DEFAULT_RETRY_DELAYS, retry_transient_connect
from rxmesh.providers import Store, observe

__all__ = ["PreWarmer", "StoreBuildWitness"]

PREWARM_QUERY = NodeQuery(node_type="NodeType")
"""The one-shot query the sweep reads: every NodeType record."""

BUILD_WITNESS_PREFIX = "system/_build"
"""Where the store-backed witness keeps its records (``system/_build/<fingerprint>``)."""

BUILD_WITNESS_NODE_TYPE = "BuildVerdict"
"""The node type of witness records written by :meth:`StoreBuildWitness.record`."""

_SEGMENT = re.compile(r"[A-Za-z0-9.-][A-Za-z0-9._-]*")
_VERDICTS = {
    "GO": WitnessVerdict.GO,
    "NO-GO": WitnessVerdict.NO_GO,
    "NO_GO": WitnessVerdict.NO_GO,
    "UNDETERMINED": WitnessVerdict.UNDETERMINED,
}


def default_holder() -> str:
    """``"<hostname>:<pid>"``: who this process is when it claims a build."""
    return f"{socket.gethostname()}:{os.getpid()}"


def proceed_locally(error: BuildCoordinationUnreachableError) -> bool:
    """The default local decision on UNDETERMINED: proceed (baking is local and idempotent)."""
    return True


class StoreBuildWitness:
    """The durable witness kept in the store (a :class:`~rxmesh.messaging.BuildWitness`).

    Args:
        store: where the records live (read through the retry ladder).
        prefix: the path under which records live.
        retry_delays: the one-shot read's retry ladder.
        scheduler: where the ladder's timers run.
    """

    def __init__(
        self,
        store: Store,
        *,
        prefix: str = BUILD_WITNESS_PREFIX,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        scheduler: abc.SchedulerBase | None = None,
    ) -> None:
        self.store = store
        self.prefix = prefix.rstrip("/")
        self._retry = retry_transient_connect(tuple(retry_delays), scheduler=scheduler)

    def path_for(self, fingerprint: str) -> str:
        """The record's path: the fingerprint itself when it is a plain path segment, else
        ``"sha256-<hex>"`` of it (``"sha256:0f3c"`` has a ``:``, which paths do not allow)."""
        if not fingerprint:
            raise ValueError("a build fingerprint cannot be empty")
        if _SEGMENT.fullmatch(fingerprint) and len(fingerprint) <= MAX_SEGMENT_LENGTH:
            segment = fingerprint
        else:
            segment = "sha256-" + hashlib.sha256(fingerprint.encode()).hexdigest()
        return f"{self.prefix}/{segment}"

    async def verdict(self, fingerprint: str) -> WitnessVerdict:
        """The recorded verdict; UNDETERMINED only when there is cleanly no record.

        Raises:
            MalformedWitnessRecordError: a record exists without a readable verdict.
            Exception: a failed read propagates unchanged (never UNDETERMINED).
        """
        path = self.path_for(fingerprint)
        found = await first_value(observe(self.store.read, path).pipe(self._retry))
        if found is None:
            return WitnessVerdict.UNDETERMINED
        content = found.content
        raw = content.get("verdict") if isinstance(content, dict) else None
        verdict = _VERDICTS.get(raw.upper()) if isinstance(raw, str) else None
        if verdict is None:
            raise MalformedWitnessRecordError(
                f"build witness record '{path}' has no readable verdict (content.verdict must be "
                f"'GO' or 'NO-GO', got {raw!r})"
            )
        return verdict

    def record(self, fingerprint: str, verdict: WitnessVerdict | str) -> Observable[MeshNode]:
        """Write a witness record (cold; insert-if-absent, as every store write)."""
        if isinstance(verdict, WitnessVerdict):
            value = verdict
        elif verdict.upper() in _VERDICTS:
            value = _VERDICTS[verdict.upper()]
        else:
            raise ValueError(f"a witness verdict is 'GO' or 'NO-GO', got {verdict!r}")
        text = "NO-GO" if value is WitnessVerdict.NO_GO else value.value
        node = MeshNode(
            path=self.path_for(fingerprint),
            node_type=BUILD_WITNESS_NODE_TYPE,
            content={"verdict": text, "fingerprint": fingerprint},
        )
        return observe(self.store.write, node)


@dataclass(frozen=True, slots=True)
class PreWarmResult:
    """What a sweep did.

    Attributes:
        proceeded: whether the records were read and baked.
        decision: the build-claim decision (``None`` without a hub).
        records: NodeType records read.
        change: what baking changed in the registry (``None`` when not proceeded).
        silent_providers: providers whose Initial was not a real answer (the snapshot may be
            incomplete; the census will catch up).
    """

    proceeded: bool
    decision: BuildDecision | None
    records: int
    change: RegistryChange | None
    silent_providers: tuple[str, ...] = ()

    @property
    def baked(self) -> tuple[str, ...]:
        """Type names baked by this sweep."""
        return () if self.change is None else self.change.baked

    @property
    def malformed(self) -> tuple[str, ...]:
        """Paths of records that could not be baked."""
        return () if self.change is None else self.change.malformed


class PreWarmer:
    """The pre-warm sweep: build claim (with a hub), then bake every NodeType record.

    Args:
        source: a :class:`~rxmesh.Mesh` (its query, behind its retry ladder) or a store.
        registry: the registry to bake into.
        hub: the hub the build claim is sent from; ``None`` skips the claim.
        fingerprint: the build fingerprint claimed (required with a hub).
        holder: who claims (default :func:`default_holder`).
        witness: the durable witness (default a :class:`StoreBuildWitness` on the source's store).
        decide_locally: the decision on UNDETERMINED (default :func:`proceed_locally`).
        query: the NodeType query.
        timeout: each claim request's bound, in seconds.
        attempts: claim attempts in all.
        backoff: seconds before the 2nd, 3rd, ... claim attempt.
        retry_delays: the records read's retry ladder, when ``source`` is a store.
        scheduler: where the timers run (default: the running loop).

    Raises:
        ValueError: a hub without a fingerprint.
    """

    def __init__(
        self,
        source: Mesh | Store,
        registry: NodeTypeRegistry,
        *,
        hub: MessageHub | None = None,
        fingerprint: str | None = None,
        holder: str | None = None,
        witness: BuildWitness | None = None,
        decide_locally: LocalDecision = proceed_locally,
        query: NodeQuery = PREWARM_QUERY,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        attempts: int = DEFAULT_COORDINATION_ATTEMPTS,
        backoff: Sequence[float] = DEFAULT_COORDINATION_BACKOFF,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        scheduler: abc.SchedulerBase | None = None,
    ) -> None:
        if hub is not None and not fingerprint:
            raise ValueError("a build claim needs a fingerprint: PreWarmer(..., fingerprint=...)")
        self._mesh = source if isinstance(source, Mesh) else None
        self._store: Store = source.store if isinstance(source, Mesh) else source
        self.registry = registry
        self.hub = hub
        self.fingerprint = fingerprint
        self.holder = holder or default_holder()
        self.witness: BuildWitness = (
            witness
            if witness is not None
            else StoreBuildWitness(self._store, retry_delays=retry_delays, scheduler=scheduler)
        )
        self._decide_locally = decide_locally
        self._query = query
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = tuple(backoff)
        self._retry = retry_transient_connect(tuple(retry_delays), scheduler=scheduler)
        self._scheduler = scheduler

    async def run(self) -> PreWarmResult:
        """Run the sweep once.

        Raises:
            BuildCoordinationUnreachableError: the coordinator gave no answer in time and the
                witness says NO-GO.
            Exception: a witness read that failed, a records read that failed (after the ladder),
                or a verdict NACK from the coordinator: unchanged.
        """
        decision: BuildDecision | None = None
        if self.hub is not None:
            assert self.fingerprint is not None  # checked in __init__
            decision = await claim_build(
                self.hub,
                self.fingerprint,
                self.holder,
                witness=self.witness,
                decide_locally=self._decide_locally,
                timeout=self._timeout,
                attempts=self._attempts,
                backoff=self._backoff,
                scheduler=self._scheduler,
            )
            if not decision.proceed:
                claimed_by = decision.claim.claimed_by if decision.claim is not None else None
                logger.bind(fingerprint=self.fingerprint, decided_by=decision.decided_by).warning(
                    "pre-warm sweep skipped: build {} is not ours to warm (decided by {}{})",
                    self.fingerprint,
                    decision.decided_by,
                    f"; claimed by {claimed_by}" if claimed_by else "",
                )
                return PreWarmResult(False, decision, 0, None)
        frame = await first_value(self._read())
        if frame.kind is not FrameKind.INITIAL:
            raise RuntimeError(
                f"the NodeType query answered a {frame.kind.value} frame first, not an Initial"
            )
        if frame.silent_providers:
            logger.bind(silent_providers=list(frame.silent_providers)).warning(
                "pre-warm sweep: provider(s) {} gave no real answer; baking what was read, the "
                "census will catch up",
                ", ".join(frame.silent_providers),
            )
        change = self.registry.bake_all(frame.nodes)
        logger.bind(
            records=len(frame.nodes), baked=list(change.baked), malformed=list(change.malformed)
        ).info(
            "pre-warm sweep baked {} NodeType record(s): {} type(s), {} malformed",
            len(frame.nodes),
            len(self.registry.names()),
            len(change.malformed),
        )
        return PreWarmResult(True, decision, len(frame.nodes), change, frame.silent_providers)

    def _read(self) -> Observable[QueryFrame]:
        if self._mesh is not None:
            return self._mesh.query(self._query)  # behind the mesh's own ladder
        return self._store.query(self._query).pipe(self._retry)
