"""AlterUserScramCredentials (51), v0, on the controller listener: forwarded by brokers.

Every user gets NOT_CONTROLLER from a controller that is not active, REQUEST_TIMED_OUT
when the quorum does not commit in time.
"""

from __future__ import annotations

from functools import partial

from broker.controller_handlers._common import call, controller_role
from broker.handlers.h51_alter_user_scram_credentials import failed
from broker.security.scram_admin import alter_credentials
from broker.server.dispatch import RequestContext
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    role = controller_role(ctx)
    response, code = await call(role.controller.submit(partial(alter_credentials, request)))
    return response if response is not None else failed(request, code)
