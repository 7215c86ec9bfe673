"""Who may do what: the scopes of API tokens, as pure rules.

A request is made by a principal (the scope of the token that made it and, for an application
token, its application). A route first asks whether the scope allows its kind of action at all
(``require``: otherwise 403), then which applications the principal may see (``sees``: another
application is answered as if it did not exist, 404, so that existence does not leak).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tidings.logic.errors import Forbidden


class Scope(enum.StrEnum):
    # Everything, applications and tokens included.
    ADMIN = "admin"
    # Send events to any application and read messages; nothing about endpoints or secrets.
    PRODUCER = "producer"
    # Everything inside one application: its endpoints and secrets, its messages, replay.
    APP = "app"
    # Read everything inside one application, change nothing, reveal no secret.
    APP_READ = "app_read"
    # A portal link: nothing but opening one portal session (app or app_read) of its application.
    PORTAL_LINK = "portal_link"


class Action(enum.StrEnum):
    SEND_EVENTS = "send_events"
    READ_MESSAGES = "read_messages"
    READ_ENDPOINTS = "read_endpoints"
    MANAGE_ENDPOINTS = "manage_endpoints"
    REVEAL_SECRETS = "reveal_secrets"
    REPLAY = "replay"
    READ_APPLICATION = "read_application"
    MANAGE_APPLICATIONS = "manage_applications"
    MANAGE_TOKENS = "manage_tokens"
    MAKE_PORTAL_LINKS = "make_portal_links"
    OPEN_PORTAL_SESSION = "open_portal_session"
    # The whole queue's status and dead letters, every application's at once (one
    # application's figures are its endpoints' and messages': READ_ENDPOINTS).
    READ_EVERY_APPLICATION = "read_every_application"
    # Trying a content filter on a payload: it reads and changes nothing.
    TEST_FILTERS = "test_filters"
    # The event-type catalog is the deployment's, shared by every application: every token
    # reads it, admin tokens alone change it.
    READ_EVENT_TYPES = "read_event_types"
    MANAGE_EVENT_TYPES = "manage_event_types"
    # Send a catalogued type's example to one of the application's endpoints.
    SEND_EXAMPLES = "send_examples"


ALLOWED: Mapping[Scope, frozenset[Action]] = {
    # Opening a portal session is what a link does; no other token does it.
    Scope.ADMIN: frozenset(Action) - {Action.OPEN_PORTAL_SESSION},
    Scope.PRODUCER: frozenset(
        {
            Action.SEND_EVENTS,
            Action.READ_MESSAGES,
            Action.TEST_FILTERS,
            Action.READ_EVENT_TYPES,
        }
    ),
    Scope.APP: frozenset(
        {
            Action.SEND_EVENTS,
            Action.READ_MESSAGES,
            Action.READ_ENDPOINTS,
            Action.MANAGE_ENDPOINTS,
            Action.REVEAL_SECRETS,
            Action.REPLAY,
            Action.READ_APPLICATION,
            Action.MAKE_PORTAL_LINKS,
            Action.TEST_FILTERS,
            Action.READ_EVENT_TYPES,
            Action.SEND_EXAMPLES,
        }
    ),
    Scope.APP_READ: frozenset(
        {
            Action.READ_MESSAGES,
            Action.READ_ENDPOINTS,
            Action.READ_APPLICATION,
            Action.TEST_FILTERS,
            Action.READ_EVENT_TYPES,
        }
    ),
    Scope.PORTAL_LINK: frozenset({Action.OPEN_PORTAL_SESSION}),
}
# The scopes that belong to one application.
APPLICATION_SCOPES = frozenset({Scope.APP, Scope.APP_READ, Scope.PORTAL_LINK})
# What a portal session may not do, whatever its scope: the customer's page neither makes links
# (a one-hour session would renew itself for ever) nor sends events (the producer sends them).
NOT_IN_PORTAL_SESSIONS = frozenset({Action.MAKE_PORTAL_LINKS, Action.SEND_EVENTS})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: a token's scope, its application (application scopes only), its
    id (None for the local runtime's loopback access while no token exists), and whether it is a
    session a portal link opened."""

    scope: Scope
    app_id: int | None = None
    token_id: int | None = None
    portal_session: bool = False

    def __post_init__(self) -> None:
        if (self.scope in APPLICATION_SCOPES) != (self.app_id is not None):
            raise ValueError("an application is named by app-scoped principals, and only them")
        if self.portal_session and self.scope not in (Scope.APP, Scope.APP_READ):
            raise ValueError("a portal session is of scope app or app_read")

    def context(self) -> dict[str, str]:
        """The principal as an API Gateway authorizer context (string values only)."""
        found = {"scope": self.scope.value}
        if self.app_id is not None:
            found["app_id"] = str(self.app_id)
        if self.token_id is not None:
            found["token_id"] = str(self.token_id)
        if self.portal_session:
            found["portal_session"] = "true"
        return found

    @classmethod
    def from_context(cls, context: Mapping[str, object] | None) -> Principal | None:
        """The principal an authorizer context describes, or None when it describes none."""
        if not context:
            return None
        try:
            scope = Scope(str(context.get("scope")))
            app_id = _optional_id(context.get("app_id"))
            token_id = _optional_id(context.get("token_id"))
            portal_session = context.get("portal_session") in ("true", True)
            return cls(scope, app_id, token_id, portal_session)
        except ValueError:
            return None


def _optional_id(value: object) -> int | None:
    if value is None or value == "":
        return None
    text = str(value)
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ValueError(text)
    return int(text)


def permits(principal: Principal, action: Action) -> bool:
    if principal.portal_session and action in NOT_IN_PORTAL_SESSIONS:
        return False
    return action in ALLOWED[principal.scope]


def require(principal: Principal, action: Action) -> None:
    """Refuse (403) an action the principal's scope does not allow, whatever it is done to."""
    if not permits(principal, action):
        who = "a portal session" if principal.portal_session else "a token"
        raise Forbidden(
            "forbidden",
            f"{who} of scope {principal.scope.value} may not {action.value.replace('_', ' ')}",
        )


def sees(principal: Principal, app_id: int) -> bool:
    """Whether the principal may know the application exists."""
    return principal.scope not in APPLICATION_SCOPES or principal.app_id == app_id
