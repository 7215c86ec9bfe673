"""Portal page: API Gateway (GET /portal, GET /portal/{asset}, no authorizer) → the portal's
static files from ``tidings.portal``, with its security headers. Touches no database and no
secret: the page asks the API for everything it shows."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.observability import logger
from tidings.portal import answer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    found = answer(str(event.get("path") or ""), wiring.settings().portal_frame_ancestors)
    return {
        "statusCode": found.status,
        "headers": found.headers,
        "body": found.body.decode("utf-8"),
        "isBase64Encoded": False,
    }
