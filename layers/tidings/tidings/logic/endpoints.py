"""Endpoint use cases: create, read, page, change, delete, rotate and reveal the secret, read
health.

Secrets leave this module only in the results of ``create_endpoint``, ``rotate_secret`` and
``reveal_secret`` (asked for on purpose, by a token that may manage the application's endpoints);
they are stored encrypted (``tidings.secrets``), sealed for the endpoint's id in the transaction
that installs them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer

from tidings.config import Settings, get_settings
from tidings.dal import endpoints as dal
from tidings.dal import secrets as secrets_dal
from tidings.dal.applications import DEFAULT_APP_ID
from tidings.dal.connection import Cursor, Database
from tidings.delivery import retry_schedule, signing, ssrf
from tidings.delivery.lanes import Lane, in_flight_cap, lane_of
from tidings.logic import credentials as creds
from tidings.logic import filters, lines
from tidings.logic.channels import check_channels
from tidings.logic.errors import InvalidInput, NotFound, Unavailable
from tidings.logic.validation import (
    MAX_TEXT,
    check_id,
    check_limit,
    check_payload_format,
    clean_text,
    decode_cursor,
    encode_cursor,
)
from tidings.observability import logger
from tidings.secrets.envelope import DataKey, open_secret, seal_credential, seal_secret
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import KeyUnavailable

MAX_URL_LENGTH = 2048
MAX_DESCRIPTION_LENGTH = 1000
MAX_EVENT_TYPES = 100
# An endpoint's rate limit: at least one request a minute (a slower bucket would keep its
# messages waiting for hours), at most a million a second.
MIN_RATE_LIMIT_PER_S = 1 / 60
MAX_RATE_LIMIT_PER_S = 1_000_000
# An endpoint's own cap on its deliveries in flight (the column's check: 1..1000).
MIN_MAX_IN_FLIGHT = 1
MAX_MAX_IN_FLIGHT = 1000

# A delay in seconds, written as a whole number when it is one.
Seconds = Annotated[
    float,
    PlainSerializer(lambda v: int(v) if float(v).is_integer() else v, return_type=float),
]
ScheduleSource = Literal["endpoint", "max_attempts", "default"]
PayloadFormatName = Literal["raw", "envelope"]


class Endpoint(BaseModel):
    id: int
    url: str
    description: str
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    event_types: list[str]
    max_attempts: int | None = Field(
        description="Deprecated: use retry_schedule. The endpoint's attempt limit, if one was "
        "set: the deployment's schedule cut or extended to max_attempts - 1 delays."
    )
    retry_schedule: list[Seconds] = Field(
        description="The waits between attempts that this endpoint's messages follow, in "
        "seconds (len + 1 attempts): the endpoint's own, or the deployment's."
    )
    retry_schedule_source: ScheduleSource = Field(
        description="Where retry_schedule comes from: the endpoint's own (endpoint), the "
        "deployment's fitted to max_attempts (max_attempts), or the deployment's (default)."
    )
    timeout_ms: int | None
    rate_limit_per_s: float | None
    payload_format: PayloadFormatName = Field(
        description="What the endpoint receives as the body: the producer's payload as it is "
        "(raw), or the Standard Webhooks envelope {type, timestamp, data} around it (envelope). "
        "Every request also names the event's type in the webhook-event-type header."
    )
    max_in_flight: int | None = Field(
        description="The endpoint's own cap on its deliveries in flight (1..1000), in either "
        "lane; null: none of its own (in the slow lane, the deployment's slow-lane cap applies)."
    )
    lane: Lane = Field(
        description="Its speed lane. slow: one of its attempts took at least the slow-lane "
        "threshold (1 s by default) or timed out within the hold (10 minutes by default) and it "
        "has not since been accepted fifty times there in under half that threshold without a "
        "failure, or it has not answered yet; its deliveries then travel apart, one per sender "
        "invocation and a few at once, so that they never hold back other endpoints'. fast: "
        "otherwise."
    )
    slow_until: datetime | None = Field(
        description="When a slow answer's hold ends at the latest (another slow answer extends "
        "it; quick answers in the slow lane may end it sooner, once per hold); null when none "
        "holds it in the slow lane."
    )
    in_flight_limit: int | None = Field(
        description="The cap on its deliveries in flight now: max_in_flight, else the slow "
        "lane's while it is in it; null: no cap of its own."
    )
    # While rotated-out secrets still sign: when the last of them stops.
    previous_secret_expires_at: datetime | None
    headers: dict[str, str] | None = Field(
        default=None,
        description="Static headers sent with every request, values redacted (••••1a2b)",
    )
    auth: dict[str, Any] | None = Field(
        default=None,
        description="The Authorization scheme (basic, bearer, oauth2_client_credentials), "
        "its secrets redacted",
    )
    tls_client_certificate: dict[str, Any] | None = Field(
        default=None,
        description="The client certificate presented in the TLS handshake: subject, issuer, "
        "not_after, sha256_fingerprint (its key is never shown)",
    )
    tls_server_ca: dict[str, Any] | None = Field(
        default=None,
        description="The CA bundle the receiver's certificate must chain to instead of the "
        "public roots: how many certificates, their subjects, the earliest not_after",
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="The content filter: of the events of its types, the endpoint receives only "
        "those whose payload (and type, as $event_type) it matches; null: every one. See "
        "POST /v1/filters/test.",
    )
    channels: list[str] = Field(
        description="The channels it subscribes to: when any, it receives an event of its types "
        "only if the event carries one of them; none: whatever the event's channels.",
    )
    ordering: lines.Ordering = Field(
        description="fifo: the endpoint receives each line of its messages (one per ordering "
        "key; events without one share a line) one message at a time, in the order the events "
        "were accepted, the next once the one before is delivered or dead-lettered; lines of "
        "different keys go side by side. none: concurrently, in no promised order."
    )
    fifo_batch_size: int = Field(
        description="For fifo: up to this many consecutive messages of a line in one request "
        "(a JSON array, one signature, webhook-id batch_<first>_<last>); 1: one at a time."
    )
    fifo_on_dead_letter: lines.OnDeadLetter = Field(
        description="For fifo: continue (a dead letter lets its line go on) or pause (the line "
        "waits at the dead letter until a person resumes it or replays it)."
    )
    paused_lines: int = Field(
        default=0, description="How many of its lines are paused at a dead letter."
    )
    created_at: datetime
    updated_at: datetime


class CreatedEndpoint(Endpoint):
    """The new endpoint with its signing secret, shown this once."""

    secret: str


class RotatedSecret(BaseModel):
    endpoint_id: int
    secret: str
    # When the secret this one replaced stops signing (the endpoint's other rotated-out secrets
    # keep their own times, at most max_signing_secrets sign at once).
    previous_secret_expires_at: datetime | None


class EndpointPage(BaseModel):
    items: list[Endpoint]
    next_cursor: str | None


class HourOfAttempts(BaseModel):
    hour: datetime
    delivered: int = Field(description="attempts answered with a 2xx status")
    failed: int = Field(description="attempts that were not")


class EndpointHealth(BaseModel):
    endpoint_id: int
    circuit_state: str
    consecutive_failures: int
    failure_threshold: int
    cooldown_s: float
    opened_at: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    sample_count: int
    percentiles_at: datetime | None
    # Messages of this endpoint per status (pending, in_flight, delivered, failed, dead_letter).
    counts: dict[str, int]
    hourly: list[HourOfAttempts] = Field(
        description="The last 24 hours' attempts, an hour each, oldest first (the current hour "
        "last, so far)"
    )


class RevealedSecret(BaseModel):
    endpoint_id: int
    secret: str = Field(description="The current signing secret (whsec_…)")


def create_endpoint(
    db: Database,
    *,
    keyring: Keyring,
    url: str,
    description: str = "",
    event_types: Sequence[str] = ("*",),
    max_attempts: int | None = None,
    timeout_ms: int | None = None,
    rate_limit_per_s: float | None = None,
    retry_schedule: Sequence[float] | None = None,
    payload_format: str | None = None,
    max_in_flight: int | None = None,
    filter: Mapping[str, Any] | None = None,
    channels: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    auth: Mapping[str, Any] | None = None,
    tls_client_certificate: Mapping[str, str] | None = None,
    tls_server_ca_pem: str | None = None,
    ordering: str | None = None,
    fifo_batch_size: int | None = None,
    fifo_on_dead_letter: str | None = None,
    settings: Settings | None = None,
    resolver: ssrf.Resolver | None = None,
    app_id: int = DEFAULT_APP_ID,
) -> CreatedEndpoint:
    """Create an endpoint of an application after checking its URL against the SSRF rules;
    returns its secret. ``retry_schedule`` (its own) and ``max_attempts`` (deprecated) exclude
    each other. Without a ``payload_format`` it gets its application's default for new
    endpoints, else the deployment's."""
    cfg = settings or get_settings()
    if retry_schedule is not None and max_attempts is not None:
        raise _conflicting_schedule()
    fields = _checked_fields(
        {
            "url": url,
            "description": description,
            "event_types": event_types,
            "max_attempts": max_attempts,
            "timeout_ms": timeout_ms,
            "rate_limit_per_s": rate_limit_per_s,
            "retry_schedule": retry_schedule,
            "max_in_flight": max_in_flight,
            "filter": filter,
            "channels": channels,
            "ordering": ordering,
            "fifo_batch_size": fifo_batch_size,
            "fifo_on_dead_letter": fifo_on_dead_letter,
        },
        cfg,
        resolver,
    )
    if payload_format is not None:
        fields["payload_format"] = check_payload_format(payload_format, "payload_format")
    given = {
        "headers": headers,
        "auth": auth,
        "tls_client_certificate": tls_client_certificate,
        "tls_server_ca_pem": tls_server_ca_pem,
    }
    checked = _checked_credentials({k: v for k, v in given.items() if v is not None}, cfg, resolver)
    secret = signing.generate_secret()
    key = _sealing_key(db, keyring)

    def create(cur: Cursor) -> dict[str, Any] | None:
        row = dal.insert_endpoint(
            cur, app_id=app_id, deployment_payload_format=cfg.payload_format, **fields
        )
        if row is not None:
            _install(cur, row["id"], key, secret, cfg)
            _install_credentials(cur, row["id"], key, checked)
            row["credentials"] = {kind: c.shown for kind, c in checked.items() if c is not None}
        return row

    row = db.run(create, transaction=True)
    if row is None:
        # The application was deleted since the request found it.
        raise NotFound("application", app_id)
    return CreatedEndpoint(**_shown(row, cfg), secret=secret)


def get_endpoint(
    db: Database,
    endpoint_id: int,
    *,
    app_id: int = DEFAULT_APP_ID,
    settings: Settings | None = None,
) -> Endpoint:
    """One endpoint of an application, with the retry schedule its messages follow."""
    check_id(endpoint_id, "endpoint_id")
    row = db.run(lambda cur: dal.get_endpoint(cur, app_id, endpoint_id))
    if row is None:
        raise NotFound("endpoint", endpoint_id)
    return Endpoint(**_shown(row, settings or get_settings()))


def list_endpoints(
    db: Database,
    *,
    cursor: str | None = None,
    limit: int = 50,
    app_id: int = DEFAULT_APP_ID,
    settings: Settings | None = None,
) -> EndpointPage:
    """An application's endpoints by ascending id, ``limit`` (at most 100) at a time."""
    check_limit(limit)
    cfg = settings or get_settings()
    after_id = 0 if cursor is None else decode_cursor(cursor)
    rows = db.run(lambda cur: dal.list_endpoints(cur, app_id, after_id=after_id, limit=limit))
    items = [Endpoint(**_shown(row, cfg)) for row in rows[:limit]]
    more = len(rows) > limit
    return EndpointPage(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)


def update_endpoint(
    db: Database,
    endpoint_id: int,
    changes: Mapping[str, Any],
    *,
    settings: Settings | None = None,
    resolver: ssrf.Resolver | None = None,
    app_id: int = DEFAULT_APP_ID,
    keyring: Keyring | None = None,
) -> Endpoint:
    """Change the given fields (url, description, event_types, retry_schedule, max_attempts,
    timeout_ms, rate_limit_per_s, payload_format, max_in_flight, enabled, filter, channels,
    ordering, fifo_batch_size, fifo_on_dead_letter: None sets an ordering option's default); a
    None override goes back to the deployment default (payload_format has no such default: it
    must name a format); a None filter or channels removes them.
    Setting a retry_schedule clears max_attempts (deprecated) and setting max_attempts clears the
    endpoint's own schedule: the two exclude each other.

    The receiver credentials (headers, auth, tls_client_certificate, tls_server_ca_pem; sealed
    with ``keyring``, which changing one needs) are each replaced whole when given, removed when
    None, left alone when absent."""
    check_id(endpoint_id, "endpoint_id")
    cfg = settings or get_settings()
    credential_changes = {k: v for k, v in changes.items() if k in creds.CREDENTIAL_FIELDS}
    changes = {k: v for k, v in changes.items() if k not in creds.CREDENTIAL_FIELDS}
    unknown = sorted(set(changes) - set(dal.UPDATABLE_FIELDS))
    if unknown:
        raise InvalidInput("unknown_field", f"{unknown[0]} cannot be changed", unknown[0])
    if "enabled" in changes and not isinstance(changes["enabled"], bool):
        raise InvalidInput("invalid_type", "enabled must be true or false", "enabled")
    checked = _checked_fields({k: v for k, v in changes.items() if k != "enabled"}, cfg, resolver)
    if "enabled" in changes:
        checked["enabled"] = changes["enabled"]
    own, limit = checked.get("retry_schedule"), checked.get("max_attempts")
    if own is not None and limit is not None:
        raise _conflicting_schedule()
    if own is not None:
        checked["max_attempts"] = None
    if limit is not None:
        checked["retry_schedule"] = None
    new_credentials = _checked_credentials(credential_changes, cfg, resolver)
    key: DataKey | None = None
    if any(c is not None for c in new_credentials.values()):
        if keyring is None:
            raise ValueError("changing a receiver credential needs the keyring")
        key = _sealing_key(db, keyring)

    def update(cur: Cursor) -> dict[str, Any] | None:
        row = dal.update_endpoint(
            cur, app_id, endpoint_id, checked, also_changed=sorted(new_credentials)
        )
        if row is not None:
            lines.reorder_if_changed(cur, endpoint_id, list(checked))
        if row is None or not new_credentials:
            return row
        _install_credentials(cur, endpoint_id, key, new_credentials)
        row = dal.get_endpoint(cur, app_id, endpoint_id)
        shown = (row or {}).get("credentials") or {}
        if "auth" in shown and creds.has_authorization_header(shown.get("headers")):
            raise InvalidInput(
                "reserved_header",
                "authorization cannot be a static header of an endpoint with auth",
                "headers" if "headers" in credential_changes else "auth",
            )
        return row

    row = db.run(update, transaction=True)
    if row is None:
        raise NotFound("endpoint", endpoint_id)
    return Endpoint(**_shown(row, cfg))


def delete_endpoint(db: Database, endpoint_id: int, *, app_id: int = DEFAULT_APP_ID) -> None:
    """Soft delete: the endpoint stops receiving and disappears; its history stays."""
    check_id(endpoint_id, "endpoint_id")
    # In a transaction: a connection lost before COMMIT is retried, one lost during COMMIT is
    # not (run twice after it committed, the delete would answer 404).
    if not db.run(lambda cur: dal.soft_delete_endpoint(cur, app_id, endpoint_id), transaction=True):
        raise NotFound("endpoint", endpoint_id)


def rotate_secret(
    db: Database,
    endpoint_id: int,
    *,
    keyring: Keyring,
    settings: Settings | None = None,
    app_id: int = DEFAULT_APP_ID,
) -> RotatedSecret:
    """A new signing secret; the one it replaces keeps signing for the configured overlap, and
    so do earlier ones still within theirs, up to ``max_signing_secrets`` in all (the oldest
    beyond that stops at once)."""
    check_id(endpoint_id, "endpoint_id")
    cfg = settings or get_settings()
    secret = signing.generate_secret()
    key = _sealing_key(db, keyring)

    def rotate(cur: Cursor) -> tuple[bool, datetime | None]:
        # An endpoint of another application is as unknown as one that does not exist.
        if dal.get_endpoint(cur, app_id, endpoint_id) is None:
            return False, None
        secret_id = secrets_dal.next_endpoint_secret_id(cur)
        installed = _install(cur, endpoint_id, key, secret, cfg, secret_id=secret_id)
        # Reported in the rotation's own transaction, named by the new secret's row.
        dal.report_secret_rotated(
            cur,
            app_id,
            endpoint_id,
            secret_id=secret_id,
            previous_secret_expires_at=installed[1],
        )
        return installed

    # In a transaction: a connection lost before COMMIT is retried, one lost during COMMIT is
    # not (run twice, a rotation would install two secrets and shorten the overlap of others).
    found, expires = db.run(rotate, transaction=True)
    if not found:
        raise NotFound("endpoint", endpoint_id)
    return RotatedSecret(endpoint_id=endpoint_id, secret=secret, previous_secret_expires_at=expires)


def _sealing_key(db: Database, keyring: Keyring) -> DataKey:
    """The data key to seal a new secret with, found (or made) before any transaction opens:
    it may take a call to KMS."""
    try:
        return db.run(keyring.sealing_key)
    except KeyUnavailable as exc:
        logger.error("no data key to seal a signing secret with", extra={"reason": str(exc)})
        raise Unavailable(
            "secrets_key_unavailable",
            "the key that encrypts signing secrets is unavailable; retry later",
        ) from None


def _checked_credentials(
    given: Mapping[str, Any], settings: Settings, resolver: ssrf.Resolver | None
) -> dict[str, creds.CheckedCredential | None]:
    """The receiver credentials of a request, checked (a token URL as a target)."""
    return creds.check_credentials(
        given,
        check_url=lambda url, where: check_target_url(url, settings, resolver, field=where),
    )


def _install_credentials(
    cur: Cursor,
    endpoint_id: int,
    key: DataKey | None,
    checked: Mapping[str, creds.CheckedCredential | None],
) -> None:
    """Replace (or remove, for None) the endpoint's credentials of the kinds given; each is
    sealed for the row it is stored in, whose id is drawn first."""
    for kind, credential in checked.items():
        if credential is None:
            secrets_dal.clear_endpoint_credential(cur, endpoint_id, kind)
            continue
        assert key is not None  # drawn whenever a credential is set
        credential_id = secrets_dal.next_endpoint_credential_id(cur)
        sealed = seal_credential(key, endpoint_id, kind, credential_id, credential.content)
        secrets_dal.set_endpoint_credential(
            cur,
            endpoint_id,
            kind=kind,
            credential_id=credential_id,
            data_key_id=sealed.data_key_id,
            ciphertext=sealed.ciphertext,
            shown=credential.shown_json(),
            not_after=credential.not_after,
        )


def _install(
    cur: Cursor,
    endpoint_id: int,
    key: DataKey,
    secret: str,
    settings: Settings,
    *,
    secret_id: int | None = None,
) -> tuple[bool, datetime | None]:
    # Sealed for the row it is stored in, whose id is drawn first (here, or by the caller).
    if secret_id is None:
        secret_id = secrets_dal.next_endpoint_secret_id(cur)
    sealed = seal_secret(key, endpoint_id, secret_id, secret)
    return secrets_dal.set_endpoint_secret(
        cur,
        endpoint_id,
        secret_id=secret_id,
        data_key_id=sealed.data_key_id,
        ciphertext=sealed.ciphertext,
        overlap_s=settings.secret_rotation_overlap_s,
        max_secrets=settings.max_signing_secrets,
    )


def endpoint_health(
    db: Database, endpoint_id: int, *, app_id: int = DEFAULT_APP_ID
) -> EndpointHealth:
    check_id(endpoint_id, "endpoint_id")
    row = db.run(lambda cur: dal.endpoint_health(cur, app_id, endpoint_id))
    if row is None:
        raise NotFound("endpoint", endpoint_id)
    row["circuit_state"] = row.pop("state")
    now = row.pop("db_now")
    hours = db.run(lambda cur: dal.endpoint_hourly_attempts(cur, app_id, endpoint_id))
    return EndpointHealth(**row, hourly=day_by_hour(hours, now))


def day_by_hour(rows: Sequence[Mapping[str, Any]], now: datetime) -> list[HourOfAttempts]:
    """The 24 hours up to ``now``'s, oldest first, with the counts of the hours ``rows`` has and
    zeros for the others."""
    current = now.replace(minute=0, second=0, microsecond=0)
    found = {row["hour"]: row for row in rows}
    day = []
    for back in range(23, -1, -1):
        hour = current - timedelta(hours=back)
        row = found.get(hour)
        day.append(
            HourOfAttempts(
                hour=hour,
                delivered=int(row["delivered"]) if row else 0,
                failed=int(row["failed"]) if row else 0,
            )
        )
    return day


def reveal_secret(
    db: Database, endpoint_id: int, *, keyring: Keyring, app_id: int = DEFAULT_APP_ID
) -> RevealedSecret:
    """The endpoint's current signing secret, opened."""
    check_id(endpoint_id, "endpoint_id")

    def read(cur: Cursor) -> str | None:
        sealed = dal.endpoint_signing_secret(cur, app_id, endpoint_id)
        if sealed is None:
            return None
        try:
            keys = keyring.data_keys(cur, [sealed.data_key_id])
        except KeyUnavailable as exc:
            logger.error("no data key to open a signing secret with", extra={"reason": str(exc)})
            raise Unavailable(
                "secrets_key_unavailable",
                "the key that encrypts signing secrets is unavailable; retry later",
            ) from None
        return open_secret(keys[sealed.data_key_id], endpoint_id, sealed)

    secret = db.run(read)
    if secret is None:
        raise NotFound("endpoint", endpoint_id)
    return RevealedSecret(endpoint_id=endpoint_id, secret=secret)


# How a host name that cannot be a target is refused, whether it resolves to a refused address
# or to none at all: one answer for both, so that the check cannot tell a caller which internal
# names exist (it would otherwise map a private DNS zone through the API's resolver).
NOT_PUBLIC_HOST = "the URL's host does not resolve to a public address"


def check_target_url(
    url: str, settings: Settings, resolver: ssrf.Resolver | None = None, *, field: str = "url"
) -> str:
    """``url`` if it may be a webhook target: http(s), no credentials, not a refused address,
    on a port the deployment's sender can open. An IP address is refused with its kind ("it is
    a private address"); a host name that does not resolve, or resolves to a refused address,
    with ``NOT_PUBLIC_HOST`` alone."""
    clean_text(url, field, max_length=MAX_URL_LENGTH)
    allowed = ssrf.parse_allowed_networks(settings.allowed_networks)
    try:
        target = ssrf.resolve_target(url, allowed, resolver)
    except ssrf.InvalidTargetUrl as exc:
        raise InvalidInput("invalid_url", str(exc), field) from None
    except ssrf.BlockedTarget as exc:
        # The caller wrote the address itself: saying what kind it is tells it nothing new.
        literal = exc.host == str(exc.ip)
        raise InvalidInput("blocked_url", str(exc) if literal else NOT_PUBLIC_HOST, field) from None
    except (OSError, UnicodeError):
        raise InvalidInput("blocked_url", NOT_PUBLIC_HOST, field) from None
    port = target.url.port
    if not settings.allows_port(port):
        raise InvalidInput(
            "port_not_allowed",
            f"the URL's port {port} cannot be reached from this deployment; "
            f"the allowed ports are {', '.join(settings.endpoint_ports)}",
            field,
        )
    # The scheme is stored in lower case (HTTPS://... is the same target).
    scheme = target.url.scheme
    return scheme + url[len(scheme) :]


def _checked_fields(
    fields: Mapping[str, Any], settings: Settings, resolver: ssrf.Resolver | None
) -> dict[str, Any]:
    checked: dict[str, Any] = {
        name: lines.check_option(name, value)
        for name, value in fields.items()
        if name in lines.OPTIONS
    }
    others = [(name, value) for name, value in fields.items() if name not in lines.OPTIONS]
    for name, value in others:
        if name == "url":
            checked[name] = check_target_url(value, settings, resolver)
        elif name == "description":
            checked[name] = clean_text(
                value, "description", max_length=MAX_DESCRIPTION_LENGTH, allow_empty=True
            )
        elif name == "event_types":
            checked[name] = _checked_event_types(value)
        elif name == "max_attempts":
            checked[name] = _optional_int(value, name, 1, 100)
        elif name == "retry_schedule":
            checked[name] = _optional_schedule(value)
        elif name == "timeout_ms":
            checked[name] = _optional_int(value, name, 100, 60_000)
        elif name == "rate_limit_per_s":
            checked[name] = _optional_rate(value)
        elif name == "payload_format":
            checked[name] = check_payload_format(value, name)
        elif name == "max_in_flight":
            checked[name] = _optional_int(value, name, MIN_MAX_IN_FLIGHT, MAX_MAX_IN_FLIGHT)
        elif name in ("filter", "channels"):
            checked[name] = _checked_routing(name, value)
        else:
            raise InvalidInput("unknown_field", f"{name} is not an endpoint field", name)
    return checked


def _checked_routing(name: str, value: Any) -> Any:
    """A filter (with the jsonpath it compiles to) or channels, checked; None removes them."""
    if name == "channels":
        names = check_channels(value, name)
        return None if names is None else sorted(set(names))
    if value is None:
        return None
    compiled = filters.check_filter(value)
    return dal.StoredFilter(
        json.dumps(compiled.document, ensure_ascii=False, separators=(",", ":")),
        compiled.jsonpath,
    )


def _shown(row: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """An endpoint row as shown: the retry schedule its messages follow, and whence it comes;
    its lane and the cap on its deliveries in flight that follows from it."""
    shown = dict(row)
    shown["channels"] = list(shown.get("channels") or [])
    shown.update(creds.shown_fields(shown.pop("credentials", None)))
    slow = bool(shown.pop("slow"))
    untried = bool(shown.pop("untried"))
    shown["lane"] = lane_of(slow=slow, untried=untried)
    shown["in_flight_limit"] = in_flight_limit(shown["max_in_flight"], slow, untried, settings)
    own = shown.pop("retry_schedule")
    default = retry_schedule.deployment_default(settings)
    shown["retry_schedule"] = list(retry_schedule.effective(own, default, shown["max_attempts"]))
    shown["retry_schedule_source"] = (
        "endpoint"
        if own is not None
        else "max_attempts"
        if shown["max_attempts"] is not None
        else "default"
    )
    return shown


def in_flight_limit(
    max_in_flight: int | None, slow: bool, untried: bool, settings: Settings
) -> int | None:
    """The cap on an endpoint's deliveries in flight, as the claim applies it."""
    return in_flight_cap(
        max_in_flight,
        slow=slow,
        untried=untried,
        slow_cap=settings.slow_lane_max_in_flight,
        untried_cap=settings.untried_max_in_flight,
    )


def _conflicting_schedule() -> InvalidInput:
    return InvalidInput(
        "conflicting_fields",
        "give retry_schedule or max_attempts (deprecated), not both",
        "max_attempts",
    )


def _optional_schedule(value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        return retry_schedule.parse_endpoint_schedule(value)
    except ValueError as exc:
        raise InvalidInput("invalid_value", f"retry_schedule {exc}", "retry_schedule") from None


def _checked_event_types(value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput("invalid_type", "event_types must be a list of strings", "event_types")
    if not value:
        raise InvalidInput(
            "invalid_value", "event_types must name at least one type ('*' for all)", "event_types"
        )
    if len(value) > MAX_EVENT_TYPES:
        raise InvalidInput(
            "invalid_value", f"event_types holds more than {MAX_EVENT_TYPES} types", "event_types"
        )
    types = [clean_text(item, "event_types", max_length=MAX_TEXT) for item in value]
    return sorted(set(types))


def _optional_int(value: Any, name: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput("invalid_value", f"{name} must be an integer within {low}..{high}", name)
    return value


def _optional_rate(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("invalid_type", "rate_limit_per_s must be a number", "rate_limit_per_s")
    rate = float(value)
    if not MIN_RATE_LIMIT_PER_S <= rate <= MAX_RATE_LIMIT_PER_S:
        raise InvalidInput(
            "invalid_value",
            "rate_limit_per_s must be at least one request a minute (1/60 = 0.0167) "
            f"and at most {MAX_RATE_LIMIT_PER_S}",
            "rate_limit_per_s",
        )
    return rate
