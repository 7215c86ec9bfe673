"""The API's Lambda authorizer (TOKEN type): checks the bearer token of every request.

API Gateway calls it with the request's ``Authorization`` header (it answers 401 itself when
the header is missing) and caches what it returns for ``CACHE_TTL_S`` per distinct header value;
the local API server calls the same function for every request. A valid token gets a policy that
allows every route of the API (the answer is cached across routes, so it must not depend on the
route), its scope and application in the context the ingest function reads
(``tidings.api.scoping``), and, on AWS, the API key the usage plan throttles it by. Anything else
raises ``Unauthorized``, which API Gateway answers with 401.

Neither the token nor the header is ever logged, traced or put in an exception message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerResponse,
    APIGatewayAuthorizerTokenEvent,
)

from tidings.dal.connection import Database
from tidings.deployment import AUTHORIZER_CACHE_TTL_S
from tidings.logic import tokens
from tidings.usage_keys import UsageKeys

# How long API Gateway reuses an answer for the same Authorization header: a revoked or expired
# token keeps working on AWS for at most this long after it is refused locally.
CACHE_TTL_S = AUTHORIZER_CACHE_TTL_S
_BEARER = re.compile(r"^Bearer +(\S+) *$", re.IGNORECASE)


class Unauthorized(Exception):
    """Raised for any request without a valid token; API Gateway answers 401 to its message."""

    def __init__(self) -> None:
        super().__init__("Unauthorized")


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    match = _BEARER.match(header or "")
    return match[1] if match else None


def authorize(event: Mapping[str, Any], db: Database, keys: UsageKeys) -> dict[str, Any]:
    """The authorizer's answer to a TOKEN event; raises ``Unauthorized`` to refuse."""
    request = APIGatewayAuthorizerTokenEvent(dict(event))
    presented = bearer_token(request.authorization_token)
    who = None if presented is None else tokens.authenticate(db, presented)
    if who is None:
        raise Unauthorized()
    principal = who.principal
    policy = APIGatewayAuthorizerResponse.from_route_arn(
        request.method_arn,
        principal_id=f"token-{principal.token_id}",
        context=principal.context(),
        usage_identifier_key=tokens.usage_key(db, who, keys),
    )
    policy.allow_all_routes()
    return policy.asdict()
