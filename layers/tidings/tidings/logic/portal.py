"""Portal links and the sessions they open: the consumer portal's credentials.

A portal link opens the portal (``tidings.portal``) for one application. It is a token of scope
``portal_link`` that may do one thing, once: be exchanged for a session (``open_session``), an
``app`` token of that application, or ``app_read`` for a read-only link, that expires
``portal_session_s`` later. The link travels in the URL's fragment, which browsers never send to
a server, so it reaches no access log; the page exchanges it at once and keeps the session in the
tab's ``sessionStorage`` (never a cookie, so no other site's page can make the browser send it).
A used link cannot be used again: a link copied from a browser's history opens nothing.

Links and sessions are tokens like any other (listed and revoked with them); the portal calls
the public API with the session, so it can do what a token of that scope can, and nothing more.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field

from tidings.config import Settings, get_settings
from tidings.dal import tokens as dal
from tidings.dal.connection import Database
from tidings.logic import tokens
from tidings.logic.access import Principal, Scope
from tidings.logic.errors import InvalidInput, NotFound, Unauthorized

DEFAULT_LINK_S = 3600
# The shortest link: long enough to be opened by a person, or a test.
MIN_LINK_S = 1


class PortalLink(BaseModel):
    url: str = Field(description="Opens the portal; the credential is after '#link='")
    application: str = Field(description="The application's uid")
    read_only: bool
    expires_at: datetime = Field(description="The link must be opened before this")
    token_id: int = Field(description="The link's token id (revoke it with DELETE /v1/tokens/…)")


class SessionApplication(BaseModel):
    id: int
    uid: str
    name: str


class PortalSession(BaseModel):
    token: str = Field(description="A bearer token for the API, of scope app or app_read")
    read_only: bool
    expires_at: datetime
    application: SessionApplication


def link_url(base_url: str, credential: str) -> str:
    """The portal's address with the credential in its fragment."""
    return f"{base_url.rstrip('/')}#link={credential}"


def create_link(
    db: Database,
    app_id: int,
    app_uid: str,
    *,
    base_url: str,
    read_only: bool = False,
    expires_in_s: float = DEFAULT_LINK_S,
    made_by: int | None = None,
    settings: Settings | None = None,
    now: datetime | None = None,
) -> PortalLink:
    """A link that opens the portal of the application ``app_id`` (uid ``app_uid``) once, before
    it expires. ``made_by`` is the token that asks for it (None: an operator): the link expires
    no later than that token, and is refused once that token is revoked."""
    cfg = settings or get_settings()
    if not MIN_LINK_S <= expires_in_s <= cfg.portal_link_max_s:
        raise InvalidInput(
            "invalid_value",
            f"a link expires within {MIN_LINK_S} s to {cfg.portal_link_max_s:g} s",
            "expires_in_s",
        )
    credential = tokens.generate()
    expires_at = (now or datetime.now(UTC)) + timedelta(seconds=expires_in_s)
    row = db.run(
        lambda cur: dal.insert_token(
            cur,
            prefix=tokens.prefix_of(credential),
            token_hash=tokens.digest(credential),
            scope=Scope.PORTAL_LINK.value,
            app_id=app_id,
            description="portal link (read-only)" if read_only else "portal link",
            expires_at=expires_at,
            session_scope=(Scope.APP_READ if read_only else Scope.APP).value,
            created_by=made_by,
        ),
        transaction=True,
    )
    if row is None:
        # Deleted meanwhile.
        raise NotFound("application", app_uid)
    return PortalLink(
        url=link_url(base_url, credential),
        application=app_uid,
        read_only=read_only,
        expires_at=row["expires_at"],
        token_id=row["id"],
    )


def open_session(
    db: Database, link: Principal, *, settings: Settings | None = None
) -> PortalSession:
    """The session a portal link opens, once (the caller is the link's principal)."""
    if link.scope is not Scope.PORTAL_LINK or link.token_id is None or link.app_id is None:
        raise Unauthorized("unauthorized", "a portal link is required")
    cfg = settings or get_settings()
    token = tokens.generate()
    link_id = link.token_id
    row = db.run(
        lambda cur: dal.exchange_portal_link(
            cur,
            link_id=link_id,
            prefix=tokens.prefix_of(token),
            token_hash=tokens.digest(token),
            session_s=cfg.portal_session_s,
        ),
        transaction=True,
    )
    if row is None:
        raise Unauthorized(
            "portal_link_unusable", "this portal link was used already, has expired or is revoked"
        )
    return PortalSession(
        token=token,
        read_only=row["scope"] == Scope.APP_READ.value,
        expires_at=row["expires_at"],
        application=SessionApplication(id=row["app_id"], uid=row["app_uid"], name=row["app_name"]),
    )
