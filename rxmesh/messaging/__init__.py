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
    BuildClaim as BuildClaim,
)
from rxmesh.messaging._build import (
    BuildClaimRequest as BuildClaimRequest,
)
from rxmesh.messaging._build import BuildCoordinator
from rxmesh.messaging._build import BuildCoordinatorStatistics as BuildCoordinatorStatistics
from rxmesh.messaging._handshake import (
    DEFAULT_COORDINATION_ATTEMPTS as DEFAULT_COORDINATION_ATTEMPTS,
)
from rxmesh.messaging._handshake import (
    DEFAULT_COORDINATION_BACKOFF as DEFAULT_COORDINATION_BACKOFF,
)
from rxmesh.messaging._handshake import (
    retry_unreachable_coordination,
)
from rxmesh.messaging._hub import (
    DEFAULT_REQUEST_TIMEOUT as DEFAULT_REQUEST_TIMEOUT,
)
from rxmesh.messaging._hub import MessageContext as MessageContext
from rxmesh.messaging._hub import MessageHub
from rxmesh.messaging._router import Router
from rxmesh.messaging._router import RouterStatistics as RouterStatistics
from rxmesh.messaging._transport import Transport as Transport
from rxmesh.messaging._transport_inproc import InProcessTransport
from rxmesh.messaging._transport_nats import NatsTransport
from rxmesh.messaging._transport_nats import subject_for as subject_for
from rxmesh.messaging._wire import Ack as Ack
from rxmesh.messaging._wire import flatten_exception as flatten_exception
from rxmesh.messaging._witness import (
    BuildDecision as BuildDecision,
)
from rxmesh.messaging._witness import (
    BuildWitness as BuildWitness,
)
from rxmesh.messaging._witness import (
    InMemoryBuildWitness as InMemoryBuildWitness,
)
from rxmesh.messaging._witness import (
    LocalDecision as LocalDecision,
)
from rxmesh.messaging._witness import (
    WitnessVerdict as WitnessVerdict,
)
from rxmesh.messaging._witness import (
    claim_build as claim_build,
)
from rxmesh.messaging._witness import (
    decide_at_witness_door as decide_at_witness_door,
)

__all__ = [
    "BuildCoordinator",
    "InProcessTransport",
    "MessageHub",
    "NatsTransport",
    "Router",
    "retry_unreachable_coordination",
]
