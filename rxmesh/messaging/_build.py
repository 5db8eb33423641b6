"""The build coordinator at ``admin/build``: claims that are idempotent per holder."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

from loguru import logger
from pydantic import BaseModel, Field
from reactivex import Observable

from rxmesh.messaging._hub import DEFAULT_REQUEST_TIMEOUT, MessageContext, MessageHub
from rxmesh.messaging._router import Router

__all__ = [
    "BUILD_COORDINATOR_ADDRESS",
    "BuildClaim",
    "BuildClaimRequest",
    "BuildCoordinator",
    "BuildCoordinatorStatistics",
    "build_claim_handshake",
]

BUILD_COORDINATOR_ADDRESS = "admin/build"
"""The address of the build coordinator hub."""


class BuildClaimRequest(BaseModel):
    """Ask to hold the build of ``fingerprint`` (the pre-warm sweep's first message)."""

    message_type_name: ClassVar[str] = "rxmesh.build.BuildClaimRequest"

    fingerprint: str = Field(min_length=1)
    holder: str = Field(min_length=1)


class BuildClaim(BaseModel):
    """The coordinator's answer to a claim request.

    ``granted`` is True when ``holder`` holds the claim (now or from an earlier ask);
    ``claimed_by`` is the holder of record; ``asks`` counts how many requests from this holder for
    this fingerprint reached the coordinator (a timed-out ask that landed counts).
    """

    message_type_name: ClassVar[str] = "rxmesh.build.BuildClaim"

    fingerprint: str
    holder: str
    granted: bool
    claimed_by: str
    claim_id: str | None
    registered_at: datetime
    asks: int


@dataclass
class _Record:
    holder: str
    claim_id: str
    registered_at: datetime
    asks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BuildCoordinatorStatistics:
    """Claims registered and requests answered by a coordinator."""

    claims: int
    requests: int


class BuildCoordinator:
    """Serves build claims at ``admin/build``.

    Registration is idempotent per holder: the same holder asking again for the same fingerprint
    (for instance after its first request timed out, whether or not that request landed) gets
    the same claim back. Another holder is answered ``granted=False`` naming the holder of record
    (an answer, not an error).
    """

    def __init__(self, router: Router, *, address: str = BUILD_COORDINATOR_ADDRESS) -> None:
        self.hub = MessageHub(address, router).on(BuildClaimRequest, self._claim)
        router.register_type(BuildClaim)
        self._records: dict[str, _Record] = {}
        self._requests = 0

    async def start(self) -> BuildCoordinator:
        """Serve the coordinator's address."""
        await self.hub.start()
        return self

    async def close(self) -> None:
        """Stop serving."""
        await self.hub.close()

    def _claim(self, request: BuildClaimRequest, context: MessageContext) -> BuildClaim:
        self._requests += 1
        record = self._records.get(request.fingerprint)
        if record is None:
            record = _Record(request.holder, uuid.uuid4().hex, datetime.now(UTC))
            self._records[request.fingerprint] = record
            logger.bind(fingerprint=request.fingerprint, holder=request.holder).info(
                "build claim registered"
            )
        record.asks[request.holder] = record.asks.get(request.holder, 0) + 1
        granted = record.holder == request.holder
        return BuildClaim(
            fingerprint=request.fingerprint,
            holder=request.holder,
            granted=granted,
            claimed_by=record.holder,
            claim_id=record.claim_id if granted else None,
            registered_at=record.registered_at,
            asks=record.asks[request.holder],
        )

    def statistics(self) -> BuildCoordinatorStatistics:
        """A frozen snapshot of the coordinator's counts."""
        return BuildCoordinatorStatistics(claims=len(self._records), requests=self._requests)


def build_claim_handshake(
    hub: MessageHub,
    fingerprint: str,
    holder: str,
    *,
    timeout: float = DEFAULT_REQUEST_TIMEOUT,
    target: str = BUILD_COORDINATOR_ADDRESS,
) -> Callable[[], Observable[BuildClaim]]:
    """The handshake as an observable factory: each call asks the coordinator afresh."""
    request = BuildClaimRequest(fingerprint=fingerprint, holder=holder)

    def handshake() -> Observable[BuildClaim]:
        return hub.request(target, request, timeout, response_type=BuildClaim)

    return handshake
