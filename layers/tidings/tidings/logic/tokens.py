"""API tokens: made, listed, revoked, and checked on every request.

A token is ``tdg_`` followed by 43 characters of URL-safe base64: 32 random bytes. It is shown
once, when it is made; the database keeps its first 12 characters (to find it, and so that people
can tell tokens apart) and its SHA-256 hash. A fast hash is right here: with 256 random bits there
is nothing to guess, so a slow password hash (bcrypt, scrypt) would only add tens of milliseconds
to every request. The presented token's hash is compared with the stored one in constant time.

A token never reaches a log line, an exception message or the database: only its prefix and hash
leave this module.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.dal import tokens as dal
from tidings.dal.connection import Database
from tidings.logic import applications
from tidings.logic.access import APPLICATION_SCOPES, Principal, Scope
from tidings.logic.errors import InvalidInput, NotFound
from tidings.logic.validation import check_id, check_limit, clean_text, decode_cursor, encode_cursor
from tidings.usage_keys import UsageKeys

TOKEN_PREFIX = "tdg_"  # noqa: S105 - the fixed start of every token, no secret
TOKEN_PATTERN = re.compile(r"^tdg_[A-Za-z0-9_-]{43}$")
PREFIX_LENGTH = 12
MAX_DESCRIPTION = 200
FIRST_ADMIN_TOKEN = "first admin token (made on deploy)"  # noqa: S105 - a description

# The scopes a token can be made with (portal links are made as links: tidings.logic.portal).
TokenScope = Literal["admin", "producer", "app", "app_read"]
ListedScope = Literal["admin", "producer", "app", "app_read", "portal_link"]


class Token(BaseModel):
    """A token as listed: never the token itself nor its hash."""

    id: int
    prefix: str
    scope: ListedScope
    application: str | None
    description: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    exchanged_at: datetime | None = Field(
        default=None, description="A portal link: when it was used to open a session"
    )
    portal_link_id: int | None = Field(
        default=None, description="A portal session: the link that opened it"
    )


class CreatedToken(Token):
    """The new token, shown this once."""

    token: str


class TokenPage(BaseModel):
    items: list[Token]
    next_cursor: str | None


def generate() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def is_token(text: object) -> bool:
    return isinstance(text, str) and TOKEN_PATTERN.fullmatch(text) is not None


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


def prefix_of(token: str) -> str:
    return token[:PREFIX_LENGTH]


TokenState = Literal["valid", "expired", "revoked", "application_deleted"]


def token_state(row: Mapping[str, Any], now: datetime) -> TokenState:
    """Whether a stored token may be used at ``now`` (the database's clock)."""
    if row["revoked_at"] is not None or row.get("origin_revoked"):
        # Revoking (or the expiry of) a token ends the links it made and their sessions, and
        # revoking a link ends its session.
        return "revoked"
    if row["expires_at"] is not None and row["expires_at"] <= now:
        return "expired"
    if row["app_id"] is not None and row["app_deleted"]:
        return "application_deleted"
    return "valid"


@dataclass(frozen=True, slots=True)
class Authenticated:
    principal: Principal
    # Whose throttle the token's requests count against (see tidings.usage_keys).
    usage_owner: str
    # The API Gateway API key made for this token's requests (AWS only), if made yet.
    usage_key_id: str | None


def usage_owner(row: Mapping[str, Any]) -> str:
    """A token's own throttle, except for portal links and sessions: one per application."""
    if row["scope"] == Scope.PORTAL_LINK.value or row.get("portal_link_id") is not None:
        return f"portal-app-{row['app_id']}"
    return f"token-{row['id']}"


def authenticate(db: Database, presented: str) -> Authenticated | None:
    """The principal of a valid token; None for anything else (malformed, unknown, a wrong
    secret after a known prefix, expired, revoked, or its application deleted)."""
    if not is_token(presented):
        return None
    wanted = digest(presented)
    rows = db.run(lambda cur: dal.tokens_with_prefix(cur, prefix_of(presented)))
    match = None
    for row in rows:
        # Every candidate is compared, in constant time, whichever matches.
        if hmac.compare_digest(row["hash"], wanted):
            match = row
    if match is None or token_state(match, match["db_now"]) != "valid":
        return None
    return Authenticated(
        Principal(
            Scope(match["scope"]),
            match["app_id"],
            int(match["id"]),
            portal_session=match["portal_link_id"] is not None,
        ),
        usage_owner(match),
        match["usage_key_id"],
    )


def usage_key(db: Database, who: Authenticated, keys: UsageKeys) -> str | None:
    """The usage identifier key API Gateway throttles this caller by (None where there is no
    usage plan). Makes the token's API key on its first use."""
    token_id = who.principal.token_id
    if token_id is None:
        return None
    if who.usage_key_id is None:
        made = keys.ensure(who.usage_owner)
        if made is None:
            return None
        db.run(lambda cur: dal.set_usage_key(cur, token_id, made))
    return keys.value_for(who.usage_owner)


def create_token(
    db: Database,
    *,
    scope: str,
    application: str | None = None,
    description: str = "",
    expires_at: datetime | None = None,
    now: datetime | None = None,
) -> CreatedToken:
    """A new token; ``application`` (uid or id) is required for, and only for, scope app."""
    try:
        checked_scope = Scope(scope)
    except ValueError:
        checked_scope = None
    if checked_scope is None or checked_scope is Scope.PORTAL_LINK:
        raise InvalidInput(
            "invalid_value", "scope must be one of admin, producer, app, app_read", "scope"
        )
    if (checked_scope in APPLICATION_SCOPES) != (application is not None):
        raise InvalidInput(
            "invalid_value",
            "an application is named for scopes app and app_read, and only for them",
            "application",
        )
    app = None
    if application is not None:
        app = applications.find(db, application)
        if app is None:
            raise NotFound("application", application)
    description = clean_text(
        description, "description", max_length=MAX_DESCRIPTION, allow_empty=True
    )
    moment = now or datetime.now(UTC)
    if expires_at is not None and (expires_at.tzinfo is None or expires_at <= moment):
        raise InvalidInput(
            "invalid_value", "expires_at must be a time in the future, with its zone", "expires_at"
        )
    token = generate()
    row = db.run(
        lambda cur: dal.insert_token(
            cur,
            prefix=prefix_of(token),
            token_hash=digest(token),
            scope=checked_scope.value,
            app_id=None if app is None else app.id,
            description=description,
            expires_at=expires_at,
            session_scope=None,
        ),
        transaction=True,
    )
    if row is None:
        # The application was deleted meanwhile.
        raise NotFound("application", str(application))
    return CreatedToken(**_listed(row, None if app is None else app.uid), token=token)


def register_token(db: Database, token: str, *, description: str) -> bool:
    """Store an admin token made elsewhere (the deploy's first, kept in Secrets Manager) unless
    its hash is known already, valid or revoked (a revoked one is never brought back). True when
    it was stored now."""
    if not is_token(token):
        raise ValueError("not a Tidings token")

    def store(cur: Any) -> bool:
        if dal.token_with_hash(cur, digest(token)) is not None:
            return False
        dal.insert_token(
            cur,
            prefix=prefix_of(token),
            token_hash=digest(token),
            scope=Scope.ADMIN.value,
            app_id=None,
            description=description,
            expires_at=None,
            session_scope=None,
        )
        return True

    return db.run(store, transaction=True)


def list_tokens(db: Database, *, cursor: str | None = None, limit: int = 50) -> TokenPage:
    """Every token by ascending id (revoked and expired ones too), ``limit`` at a time."""
    check_limit(limit)
    after_id = 0 if cursor is None else decode_cursor(cursor)
    rows = db.run(lambda cur: dal.list_tokens(cur, after_id=after_id, limit=limit))
    items = [Token(**_listed(row, row["app_uid"])) for row in rows[:limit]]
    more = len(rows) > limit
    return TokenPage(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)


def get_token(db: Database, token_id: int) -> Token:
    check_id(token_id, "token_id")
    row = db.run(lambda cur: dal.get_token(cur, token_id))
    if row is None:
        raise NotFound("token", token_id)
    return Token(**_listed(row, row["app_uid"]))


def revoke_token(db: Database, token_id: int) -> Token:
    """Refuse the token from now on (on AWS, within the authorizer's cache time)."""
    check_id(token_id, "token_id")
    if db.run(lambda cur: dal.revoke_token(cur, token_id), transaction=True) is None:
        raise NotFound("token", token_id)
    return get_token(db, token_id)


def _listed(row: Mapping[str, Any], app_uid: str | None) -> dict[str, Any]:
    return {
        "id": row["id"],
        "prefix": row["prefix"],
        "scope": row["scope"],
        "application": app_uid,
        "description": row["description"],
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        "revoked_at": row["revoked_at"],
        "exchanged_at": row.get("exchanged_at"),
        "portal_link_id": row.get("portal_link_id"),
    }


def bootstrap_admin_token(
    db: Database, read: Callable[[], str | None], write: Callable[[str], None]
) -> bool:
    """Make sure the deploy's first admin token exists: ``read`` returns what its secret holds,
    ``write`` replaces it. A secret that holds a token keeps it (its hash is stored if missing,
    never brought back from revoked); otherwise a new token is written there first, then stored.
    True when a token was made now."""
    current = read()
    if current is not None and is_token(current):
        register_token(db, current, description=FIRST_ADMIN_TOKEN)
        return False
    token = generate()
    # Written before it is stored: should storing fail, the next deploy finds it and stores it.
    write(token)
    register_token(db, token, description=FIRST_ADMIN_TOKEN)
    return True
