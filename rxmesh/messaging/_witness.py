"""The durable-witness door: who decides when the build coordinator could not be reached.

:func:`claim_build` runs the handshake with :func:`retry_unreachable_coordination`. If the
coordinator answers, it decides. If every attempt got no answer in time or nobody answering (a
NO_RESPONDERS failure: over NATS, a coordinator that is down), the door asks the durable witness
(a record in the store, keyed by the build fingerprint):

- GO -> proceed, with a WARNING (nothing was verified by the coordinator);
- NO-GO -> re-raise the :class:`~rxmesh.exceptions.BuildCoordinationUnreachableError`;
- UNDETERMINED -> decide locally (the caller's ``decide_locally``).

A witness that cannot be read is not "undetermined": its error propagates (a failed read is not
an absent record).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol, runtime_checkable

from loguru import logger
from reactivex import abc

from rxmesh.aio import first_value
from rxmesh.exceptions import BuildCoordinationUnreachableError
from rxmesh.messaging._build import (
    BUILD_COORDINATOR_ADDRESS,
    BuildClaim,
    build_claim_handshake,
)
from rxmesh.messaging._handshake import (
    DEFAULT_COORDINATION_ATTEMPTS,
    DEFAULT_COORDINATION_BACKOFF,
    retry_unreachable_coordination,
)
from rxmesh.messaging._hub import DEFAULT_REQUEST_TIMEOUT, MessageHub

__all__ = [
    "BuildDecision",
    "BuildWitness",
    "InMemoryBuildWitness",
    "LocalDecision",
    "WitnessVerdict",
    "claim_build",
    "decide_at_witness_door",
]


class WitnessVerdict(StrEnum):
    """What the durable witness holds for a build fingerprint."""

    GO = "GO"
    NO_GO = "NO_GO"
    UNDETERMINED = "UNDETERMINED"


@runtime_checkable
class BuildWitness(Protocol):
    """The durable witness: a GO / NO-GO record per build fingerprint, or none."""

    async def verdict(self, fingerprint: str) -> WitnessVerdict:
        """The recorded verdict; UNDETERMINED only when there is cleanly no record.

        A read that fails must raise, never answer UNDETERMINED.
        """
        ...


class InMemoryBuildWitness:
    """A :class:`BuildWitness` held in memory (tests, embedded use); records who asked."""

    def __init__(self, verdicts: Mapping[str, WitnessVerdict] | None = None) -> None:
        self._verdicts = dict(verdicts or {})
        self.asked: list[str] = []

    def record(self, fingerprint: str, verdict: WitnessVerdict) -> None:
        """Record ``verdict`` for ``fingerprint``."""
        self._verdicts[fingerprint] = verdict

    async def verdict(self, fingerprint: str) -> WitnessVerdict:
        """The recorded verdict, UNDETERMINED when none was recorded."""
        self.asked.append(fingerprint)
        return self._verdicts.get(fingerprint, WitnessVerdict.UNDETERMINED)


LocalDecision = Callable[[BuildCoordinationUnreachableError], bool | Awaitable[bool]]
"""Decides locally whether to proceed (called only on UNDETERMINED)."""


@dataclass(frozen=True, slots=True)
class BuildDecision:
    """Whether the build proceeds, and who decided.

    ``decided_by`` is ``"coordinator"`` (``claim`` set), ``"witness"`` (GO) or ``"local"``
    (the witness was UNDETERMINED). A NO-GO is not a decision object: it raises.
    """

    proceed: bool
    decided_by: Literal["coordinator", "witness", "local"]
    claim: BuildClaim | None = None
    verdict: WitnessVerdict | None = None
    unreachable: BuildCoordinationUnreachableError | None = None


async def decide_at_witness_door(
    error: BuildCoordinationUnreachableError,
    fingerprint: str,
    witness: BuildWitness,
    decide_locally: LocalDecision,
) -> BuildDecision:
    """Ask the durable witness what to do after the coordinator could not be reached.

    Raises:
        BuildCoordinationUnreachableError: ``error`` itself, when the witness says NO-GO.
    """
    log = logger.bind(fingerprint=fingerprint)
    verdict = await witness.verdict(fingerprint)
    if verdict is WitnessVerdict.GO:
        log.warning(
            "build coordination unreachable; proceeding on the durable witness's GO for build "
            "{} (nothing was verified by the coordinator)",
            fingerprint,
        )
        return BuildDecision(True, "witness", verdict=verdict, unreachable=error)
    if verdict is WitnessVerdict.NO_GO:
        log.error(
            "build coordination unreachable and the durable witness says NO-GO for {}", fingerprint
        )
        error.add_note(f"The durable witness says NO-GO for build {fingerprint}.")
        raise error
    decided = decide_locally(error)
    proceed = bool(await decided) if inspect.isawaitable(decided) else bool(decided)
    log.warning(
        "build coordination unreachable and the durable witness has no verdict for {}; decided "
        "locally: {}",
        fingerprint,
        "proceed" if proceed else "do not proceed",
    )
    return BuildDecision(proceed, "local", verdict=verdict, unreachable=error)


async def claim_build(
    hub: MessageHub,
    fingerprint: str,
    holder: str,
    *,
    witness: BuildWitness,
    decide_locally: LocalDecision,
    timeout: float = DEFAULT_REQUEST_TIMEOUT,
    attempts: int = DEFAULT_COORDINATION_ATTEMPTS,
    backoff: Sequence[float] = DEFAULT_COORDINATION_BACKOFF,
    scheduler: abc.SchedulerBase | None = None,
    target: str = BUILD_COORDINATOR_ADDRESS,
    on_retry: Callable[[Exception, int, float], None] | None = None,
) -> BuildDecision:
    """The pre-warm door: claim the build at ``admin/build``, else ask the durable witness.

    A claim the coordinator answered decides (``proceed = claim.granted``). Every error that is
    neither "no answer in time" nor "nobody answering"
    (:func:`rxmesh.faults.is_coordination_unreachable`) propagates unchanged (a verdict NACK such
    as NOT_FOUND is an answer, not an outage).
    """
    handshake = build_claim_handshake(hub, fingerprint, holder, timeout=timeout, target=target)
    retried = retry_unreachable_coordination(
        handshake, attempts, backoff, scheduler=scheduler, target=target, on_retry=on_retry
    )
    try:
        claim = await first_value(retried)
    except BuildCoordinationUnreachableError as error:
        return await decide_at_witness_door(error, fingerprint, witness, decide_locally)
    return BuildDecision(claim.granted, "coordinator", claim=claim)
