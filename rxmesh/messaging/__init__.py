"""Messaging between hubs: a router, pluggable transports, and the build-claim handshake.

Requests between hubs go through a :class:`Router` over a transport: :class:`InProcessTransport`
by default (every message is still serialised to JSON, so the boundary behaves like the real
one) or :class:`NatsTransport` between processes and machines (``rxmesh[nats]``; nats-py is
imported only when a NATS transport is created). Exceptions never cross the boundary: the
responding side flattens them into a :class:`~rxmesh.exceptions.DeliveryFailure` NACK.

"No answer in time" arrives in two shapes (a ``TimeoutError``, or a forwarding hop's FAILED
"Response did not arrive on time" NACK); :func:`rxmesh.faults.is_no_answer_in_time` recognises
both. Nobody answering (NATS's "no responders", which cannot tell a hub that is down or not yet
re-subscribed from one that never existed) is a NO_RESPONDERS failure, not a NOT_FOUND verdict.
:func:`retry_unreachable_coordination` retries both for the build-claim handshake
(:func:`rxmesh.faults.is_coordination_unreachable`), and :func:`claim_build` takes the spent
handshake to the durable-witness door. See docs/messaging.md.

The layout: ``_hub`` hubs and their handlers; ``_router`` where a request goes and over which
transport; ``_transport`` the contract, ``_transport_inproc`` and ``_transport_nats`` its two
implementations; ``_wire`` what crosses the boundary; ``_build`` the build coordinator;
``_handshake`` the claim's retry and its honest failure; ``_witness`` the durable-witness door.
"""

from __future__ import annotations

from rxmesh.messaging._build import (
    BUILD_COORDINATOR_ADDRESS,
    BuildClaim,
    BuildClaimRequest,
    BuildCoordinator,
    BuildCoordinatorStatistics,
    build_claim_handshake,
)
from rxmesh.messaging._handshake import (
    DEFAULT_COORDINATION_ATTEMPTS,
    DEFAULT_COORDINATION_BACKOFF,
    retry_unreachable_coordination,
)
from rxmesh.messaging._hub import (
    DEFAULT_FORWARD_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    MessageContext,
    MessageHub,
)
from rxmesh.messaging._router import DEFAULT_PLACEMENT_TIMEOUT, Router, RouterStatistics
from rxmesh.messaging._transport import FrameHandler, Serving, Transport
from rxmesh.messaging._transport_inproc import InProcessTransport
from rxmesh.messaging._transport_nats import NatsTransport, subject_for
from rxmesh.messaging._wire import Ack, flatten_exception, message_type_name
from rxmesh.messaging._witness import (
    BuildDecision,
    BuildWitness,
    InMemoryBuildWitness,
    LocalDecision,
    WitnessVerdict,
    claim_build,
    decide_at_witness_door,
)

__all__ = [
    "BUILD_COORDINATOR_ADDRESS",
    "DEFAULT_COORDINATION_ATTEMPTS",
    "DEFAULT_COORDINATION_BACKOFF",
    "DEFAULT_FORWARD_TIMEOUT",
    "DEFAULT_PLACEMENT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "Ack",
    "BuildClaim",
    "BuildClaimRequest",
    "BuildCoordinator",
    "BuildCoordinatorStatistics",
    "BuildDecision",
    "BuildWitness",
    "FrameHandler",
    "InMemoryBuildWitness",
    "InProcessTransport",
    "LocalDecision",
    "MessageContext",
    "MessageHub",
    "NatsTransport",
    "Router",
    "RouterStatistics",
    "Serving",
    "Transport",
    "WitnessVerdict",
    "build_claim_handshake",
    "claim_build",
    "decide_at_witness_door",
    "flatten_exception",
    "message_type_name",
    "retry_unreachable_coordination",
    "subject_for",
]
