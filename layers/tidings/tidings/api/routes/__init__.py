"""The routes, one module per resource: each parses its request, checks who asks in which
application, calls one use case, and shapes the answer.

Everything an application holds (events, messages, endpoints, replay) is served twice: at
``/v1/…`` for the default application and at ``/v1/apps/{app}/…`` (see ``tidings.api.scoping``).
Applications and tokens are managed at ``/v1/apps`` and ``/v1/tokens``; the operators' views of
every application are at ``/v1/admin/…``; a content filter is tried at ``/v1/filters/test``;
the deployment's event-type catalog is at ``/v1/event-types``. Every module registers its routes
on the one ``router`` when it is imported.
"""

from tidings.api.routes import (
    admin,
    applications,
    dead_letters,
    endpoints,
    event_types,
    events,
    filters,
    lines,
    messages,
    portal,
    tokens,
)
from tidings.api.routes.common import router

ROUTE_MODULES = (
    events,
    messages,
    endpoints,
    lines,
    dead_letters,
    portal,
    applications,
    tokens,
    admin,
    event_types,
    filters,
)

__all__ = ["ROUTE_MODULES", "router"]
