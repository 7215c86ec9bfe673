"""A typed Python client of the Tidings API, needing nothing but ``requests``::

    from tidings.client import Client

    tidings = Client.from_env()  # TIDINGS_API_URL and TIDINGS_TOKEN
    sent = tidings.send_event("order.created", {"id": 42}, event_id="order-42")

Every operation of the API is a method of ``Client``; answers are the dataclasses of
``tidings.client.models``; a refusal raises an ``ApiError`` carrying the API's reason code and
the HTTP status (``NotFound``, ``Forbidden``…). This package imports neither the database
driver, nor the AWS SDK, nor the code that serves the API.
"""

from tidings.client import models
from tidings.client.client import UNSET, Client
from tidings.client.errors import (
    ApiError,
    ApiUnreachable,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    TidingsError,
    Unauthorized,
    UnexpectedAnswer,
)
from tidings.client.models import *  # noqa: F403 - the answers' types are the package's own

__all__ = [
    "UNSET",
    "ApiError",
    "ApiUnreachable",
    "Client",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "RateLimited",
    "ServerError",
    "TidingsError",
    "Unauthorized",
    "UnexpectedAnswer",
]
__all__ += models.__all__
