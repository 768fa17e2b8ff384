"""BrokerRegistration (62), v0-4: a broker joins the cluster (KIP-631).

The active controller writes a RegisterBrokerRecord (the broker starts fenced)
and answers its offset as the broker epoch. INCONSISTENT_CLUSTER_ID for another
cluster's broker; DUPLICATE_BROKER_REGISTRATION while another incarnation of the
same id still holds a live session; NOT_CONTROLLER on a controller that is not
active. A retry of a registration that committed gets the same epoch.
"""

from __future__ import annotations

from broker.controller_handlers._common import call, controller_role
from broker.server.dispatch import RequestContext
from controller.apis import Registration
from controller.image import Endpoint
from wire.generated.api_062_broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)

API_KEY = 62
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
    role = controller_role(ctx)
    registration = Registration(
        broker_id=request.broker_id,
        cluster_id=request.cluster_id,
        incarnation_id=request.incarnation_id,
        endpoints=tuple(Endpoint(lst.name, lst.host, lst.port, lst.security_protocol) for lst in request.listeners),
        rack=request.rack,
    )
    outcome, code = await call(role.cluster_control.register(registration))
    if outcome is None:
        return BrokerRegistrationResponse(error_code=code)
    error, epoch = outcome
    return BrokerRegistrationResponse(error_code=error, broker_epoch=epoch)
