"""``tidings endpoints add|list|show|update|enable|disable|delete|rotate-secret|recover|lines|
resume``: manage webhook endpoints and their FIFO lines, on the database or over the API."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from tidings.cli import UsageError
from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import add_app_option, app_name, parse_time, print_json, when
from tidings.config import PAYLOAD_FORMATS
from tidings.local.progress import LiveDisplay, progress_bar, table


def endpoint_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"endpoint id {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"endpoint id {text!r} must be positive")
    return value


# What ``--retry-schedule`` takes to go back to the deployment's schedule, and
# ``--max-in-flight`` to drop the endpoint's own cap.
DEFAULT_SCHEDULE_WORD = "default"
# An option ``update`` was not given (None is a value: back to the deployment's default).
_KEEP: Any = object()
# An endpoint's ordering and what a FIFO line does at a dead letter
# (tidings.logic.lines.ORDERINGS and ON_DEAD_LETTER).
ORDERINGS = ("none", "fifo")
ON_DEAD_LETTER = ("continue", "pause")
# How ``lines`` and ``resume`` name the line of events without an ordering key.
NO_KEY = "(none)"


def time_arg(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def batch_size_arg(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"batch size {text!r} must be a whole number 1..10000")
    return int(text)


def retry_schedule_arg(text: str) -> tuple[float, ...] | None:
    """``5,300,1800``: delays in whole seconds; ``default``: the deployment's schedule."""
    from tidings.delivery.retry_schedule import parse_endpoint_schedule

    if text.strip().lower() == DEFAULT_SCHEDULE_WORD:
        return None
    parts = [part.strip() for part in text.split(",")]
    delays: list[int] = []
    for position, part in enumerate(parts, start=1):
        if not part.isascii() or not part.isdigit():
            raise argparse.ArgumentTypeError(
                f"retry schedule {text!r}: delay {position} ({part!r}) is not a whole number "
                "of seconds (write e.g. 5,300,1800)"
            )
        delays.append(int(part))
    try:
        return parse_endpoint_schedule(delays)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"retry schedule {text!r} {exc}") from None


def rate_limit_arg(text: str) -> float | None:
    """``2.5``: at most 2.5 requests a second (the API checks the range); ``default``: none."""
    if text.strip().lower() == DEFAULT_SCHEDULE_WORD:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"rate limit {text!r} must be a number of requests per second "
            "(or 'default': no limit of its own)"
        )
    return value


def timeout_ms_arg(text: str) -> int | None:
    """``500``: wait 500 ms for the receiver (the API checks the range); ``default``: the
    deployment's HTTP timeout."""
    if text.strip().lower() == DEFAULT_SCHEDULE_WORD:
        return None
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(
            f"timeout {text!r} must be a whole number of milliseconds "
            "(or 'default': the deployment's HTTP timeout)"
        )
    return int(text)


def max_in_flight_arg(text: str) -> int | None:
    """``5``: at most 5 deliveries in flight (1..1000); ``default``: no cap of its own."""
    from tidings.logic.endpoints import MAX_MAX_IN_FLIGHT, MIN_MAX_IN_FLIGHT

    if text.strip().lower() == DEFAULT_SCHEDULE_WORD:
        return None
    if (
        not text.isascii()
        or not text.isdigit()
        or not MIN_MAX_IN_FLIGHT <= int(text) <= MAX_MAX_IN_FLIGHT
    ):
        raise argparse.ArgumentTypeError(
            f"max in flight {text!r} must be a whole number "
            f"{MIN_MAX_IN_FLIGHT}..{MAX_MAX_IN_FLIGHT} (or 'default': no cap of its own)"
        )
    return int(text)


def fifo_batch_size_arg(text: str) -> int:
    """``10``: up to 10 consecutive messages of a FIFO line in one request (1..100)."""
    from tidings.logic.lines import MAX_BATCH_SIZE, MIN_BATCH_SIZE

    if (
        not text.isascii()
        or not text.isdigit()
        or not MIN_BATCH_SIZE <= int(text) <= MAX_BATCH_SIZE
    ):
        raise argparse.ArgumentTypeError(
            f"fifo batch size {text!r} must be a whole number {MIN_BATCH_SIZE}..{MAX_BATCH_SIZE}"
        )
    return int(text)


def describe_ordering(endpoint: Any) -> str:
    """``none (concurrently, in no promised order)``, ``fifo (up to 10 messages a request; a
    dead letter pauses its line; 2 lines paused)``."""
    if endpoint.ordering != "fifo":
        return f"{endpoint.ordering} (concurrently, in no promised order)"
    return f"fifo ({'; '.join(_fifo_facts(endpoint))})"


def _fifo_facts(endpoint: Any) -> list[str]:
    size = endpoint.fifo_batch_size
    facts = [
        "one message a request" if size == 1 else f"up to {size} messages a request",
        "a dead letter pauses its line"
        if endpoint.fifo_on_dead_letter == "pause"
        else "a dead letter lets its line go on",
    ]
    if endpoint.paused_lines:
        facts.append(f"{_lines(endpoint.paused_lines)} paused")
    return facts


def _short_ordering(endpoint: Any) -> str:
    """The ordering in a column of ``list``: ``none``, ``fifo (batch 10, pause; 2 paused)``."""
    if endpoint.ordering != "fifo":
        return str(endpoint.ordering)
    paused = f"; {endpoint.paused_lines} paused" if endpoint.paused_lines else ""
    return f"fifo (batch {endpoint.fifo_batch_size}, {endpoint.fifo_on_dead_letter}{paused})"


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def describe_lane(endpoint: Any) -> str:
    """``slow (answers slow until 2026-05-01 12:00:00; at most 10 in flight)``, ``fast``."""
    if endpoint.lane == "fast":
        cap = endpoint.in_flight_limit
        return "fast" if cap is None else f"fast (at most {cap} in flight)"
    why = (
        f"answers slow until {when(endpoint.slow_until)} UTC"
        if endpoint.slow_until is not None
        else "not answered yet"
    )
    return f"slow ({why}; at most {endpoint.in_flight_limit} in flight)"


def describe_schedule(delays: list[float]) -> str:
    """``5s, 5m, 30m, 2h (27.6 h, 5 attempts)``"""
    if not delays:
        return "no retries (1 attempt)"
    total = sum(delays)
    span = f"{total / 3600:.1f} h" if total >= 3600 else f"{total:g} s"
    return f"{', '.join(_duration(d) for d in delays)} ({span}, {len(delays) + 1} attempts)"


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def header_arg(text: str) -> tuple[str, str]:
    """``Name: value`` as (name, value)."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError("give a header as 'Name: value'")
    return name.strip(), value.strip()


def basic_auth_arg(text: str) -> tuple[str, str]:
    """``USER:PASS`` as (user, password)."""
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise argparse.ArgumentTypeError("give Basic credentials as USER:PASS")
    return user, password


def add_credential_options(parser: argparse.ArgumentParser, *, update: bool) -> None:
    """The receiver credentials' options (each replaces its kind whole on an update)."""
    group = parser.add_argument_group(
        "receiver credentials",
        "stored encrypted; read back redacted"
        + ("; each option replaces its kind whole, --no-* removes it" if update else ""),
    )
    group.add_argument(
        "--header",
        dest="headers",
        action="append",
        type=header_arg,
        default=None,
        metavar="'NAME: VALUE'",
        help="a static header sent with every request; repeat for more (at most 20)",
    )
    group.add_argument(
        "--basic-auth", type=basic_auth_arg, default=None, metavar="USER:PASS", help="HTTP Basic"
    )
    group.add_argument("--bearer-token", default=None, metavar="TOKEN", help="a fixed bearer token")
    group.add_argument(
        "--oauth2-token-url",
        default=None,
        metavar="URL",
        help="OAuth2 client credentials: where tokens come from (with --oauth2-client-id and "
        "--oauth2-client-secret)",
    )
    group.add_argument(
        "--oauth2-client-id", default=None, metavar="ID", help="OAuth2: the client id"
    )
    group.add_argument(
        "--oauth2-client-secret",
        default=None,
        metavar="SECRET",
        help="OAuth2: the client secret (stored sealed, never shown)",
    )
    group.add_argument(
        "--oauth2-scope", default=None, metavar="SCOPE", help="OAuth2: the scope to ask for"
    )
    group.add_argument(
        "--oauth2-audience",
        default=None,
        metavar="AUDIENCE",
        help="OAuth2: the audience to ask for",
    )
    group.add_argument(
        "--oauth2-client-auth",
        choices=("basic", "post"),
        default="basic",
        help="how the client authenticates to the token URL (default: basic)",
    )
    group.add_argument(
        "--client-cert",
        default=None,
        metavar="FILE",
        help="a PEM client certificate presented in the TLS handshake (with --client-key)",
    )
    group.add_argument("--client-key", default=None, metavar="FILE", help="its PEM private key")
    group.add_argument(
        "--server-ca",
        default=None,
        metavar="FILE",
        help="PEM CA certificates the receiver's certificate must chain to (instead of the "
        "public roots)",
    )
    if update:
        for kind, what in (
            ("headers", "the static headers"),
            ("auth", "the Authorization scheme"),
            ("client-cert", "the client certificate"),
            ("server-ca", "the server CA bundle"),
        ):
            group.add_argument(
                f"--no-{kind}",
                dest=f"remove_{kind.replace('-', '_')}",
                action="store_true",
                help=f"remove {what}",
            )


def credential_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The credential fields the options give (None for a kind --no-* removes)."""
    fields: dict[str, Any] = {}
    if args.headers is not None:
        fields["headers"] = dict(args.headers)
    oauth2 = [args.oauth2_token_url, args.oauth2_client_id, args.oauth2_client_secret]
    schemes = [
        name
        for name, given in (
            ("--basic-auth", args.basic_auth is not None),
            ("--bearer-token", args.bearer_token is not None),
            ("--oauth2-*", any(v is not None for v in oauth2)),
        )
        if given
    ]
    if len(schemes) > 1:
        raise UsageError(f"give one of {', '.join(schemes)}")
    if args.basic_auth is not None:
        user, password = args.basic_auth
        fields["auth"] = {"type": "basic", "username": user, "password": password}
    elif args.bearer_token is not None:
        fields["auth"] = {"type": "bearer", "token": args.bearer_token}
    elif schemes:
        if any(v is None for v in oauth2):
            raise UsageError(
                "OAuth2 needs --oauth2-token-url, --oauth2-client-id and --oauth2-client-secret"
            )
        fields["auth"] = {
            "type": "oauth2_client_credentials",
            "token_url": args.oauth2_token_url,
            "client_id": args.oauth2_client_id,
            "client_secret": args.oauth2_client_secret,
            "scope": args.oauth2_scope,
            "audience": args.oauth2_audience,
            "client_auth": args.oauth2_client_auth,
        }
    if (args.client_cert is None) != (args.client_key is None):
        raise UsageError("give --client-cert and --client-key together")
    if args.client_cert is not None:
        fields["tls_client_certificate"] = {
            "certificate_pem": _read_pem(args.client_cert, "--client-cert"),
            "private_key_pem": _read_pem(args.client_key, "--client-key"),
        }
    if args.server_ca is not None:
        fields["tls_server_ca_pem"] = _read_pem(args.server_ca, "--server-ca")
    for kind, name in (
        ("headers", "headers"),
        ("auth", "auth"),
        ("client_cert", "tls_client_certificate"),
        ("server_ca", "tls_server_ca_pem"),
    ):
        if getattr(args, f"remove_{kind}", False):
            if name in fields:
                raise UsageError(f"--no-{kind.replace('_', '-')} and a new value conflict")
            fields[name] = None
    return fields


def _read_pem(path: str, option: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: cannot read {path}: {exc.__class__.__name__}") from None


def describe_credentials(endpoint: Any) -> list[tuple[str, object]]:
    """What ``show`` prints of the credentials (their redacted forms)."""
    facts: list[tuple[str, object]] = []
    if endpoint.headers:
        facts.append(("headers", ", ".join(f"{k}: {v}" for k, v in endpoint.headers.items())))
    if endpoint.auth:
        auth = endpoint.auth
        detail = {
            "basic": lambda: f"basic ({auth['username']})",
            "bearer": lambda: f"bearer token {auth['token']}",
            "oauth2_client_credentials": lambda: (
                f"oauth2 client credentials ({auth['client_id']} at {auth['token_url']})"
            ),
        }.get(auth.get("type"), lambda: str(auth.get("type")))()
        facts.append(("auth", detail))
    if endpoint.tls_client_certificate:
        cert = endpoint.tls_client_certificate
        facts.append(("client cert", f"{cert['subject']}, expires {cert['not_after']}"))
    if endpoint.tls_server_ca:
        facts.append(("server CA", ", ".join(endpoint.tls_server_ca["subjects"])))
    return facts


def filter_arg(text: str) -> Any:
    """A content filter as JSON text, or ``@FILE`` holding it; ``null`` (update) removes it."""
    where = "--filter"
    if text.startswith("@"):
        where = f"the filter file {text[1:]}"
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise argparse.ArgumentTypeError(f"cannot read {where}: {exc}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise argparse.ArgumentTypeError(f"{where} is not valid JSON") from None


def add_routing_options(parser: argparse.ArgumentParser, *, update: bool) -> None:
    """--filter and --channel: which of the events of its types the endpoint receives."""
    keep = _KEEP if update else None
    parser.add_argument(
        "--filter",
        type=filter_arg,
        default=keep,
        metavar="JSON|@FILE",
        help="a content filter over the payload (and $event_type), e.g. "
        '\'{"total": {"$gte": 100}}\'; only events it matches are delivered'
        + ("; null removes it" if update else ""),
    )
    parser.add_argument(
        "--channel",
        dest="channels",
        action="append",
        default=None,
        metavar="NAME",
        help="a channel to subscribe to (then only events carrying one of its channels are "
        "delivered); repeat for more" + ("; replaces its channels" if update else ""),
    )
    if update:
        parser.add_argument(
            "--no-channels",
            action="store_true",
            help="subscribe to no channel: events of its types whatever their channels",
        )


def add_ordering_options(parser: argparse.ArgumentParser, *, update: bool) -> None:
    """--ordering, --fifo-batch-size and --fifo-on-dead-letter: ordered delivery."""
    keep = _KEEP if update else None
    group = parser.add_argument_group(
        "ordered delivery",
        "fifo: each line of its messages (one per ordering key, see tidings send "
        "--ordering-key; events without one share a line) is delivered one message at a time, "
        "in the order the events were accepted"
        + ("; a change of ordering applies to the messages not yet attempted" if update else ""),
    )
    group.add_argument(
        "--ordering",
        choices=ORDERINGS,
        default=keep,
        help="none (concurrently, in no promised order; the default) or fifo",
    )
    group.add_argument(
        "--fifo-batch-size",
        type=fifo_batch_size_arg,
        default=keep,
        metavar="N",
        help="for fifo: up to N consecutive messages of a line in one request, a JSON array "
        "signed once (1..100; default 1: one at a time)",
    )
    group.add_argument(
        "--fifo-on-dead-letter",
        choices=ON_DEAD_LETTER,
        default=keep,
        help="for fifo: continue (a dead letter lets its line go on; the default) or pause "
        "(the line waits at it until resumed: tidings endpoints resume)",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "endpoints",
        help="add, list, change, disable, delete endpoints; rotate secrets; recover; list and "
        "resume FIFO lines",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="add an endpoint; prints its id and its secret (once)")
    add.add_argument(
        "url",
        metavar="URL",
        help="where to deliver: http or https, on a port of TIDINGS_ENDPOINT_PORTS (80 and 443 "
        "by default; against the dev runtime, any port)",
    )
    add.add_argument(
        "--event-type",
        dest="event_types",
        action="append",
        required=True,
        metavar="TYPE",
        help="an event type to receive ('*' for all); repeat for more",
    )
    add.add_argument("--description", default="", help="a note for people")
    add.add_argument(
        "--rate-limit",
        type=float,
        default=None,
        metavar="PER_SECOND",
        help="requests per second to it, at least one a minute (1/60 = 0.0167)",
    )
    add.add_argument(
        "--retry-schedule",
        type=retry_schedule_arg,
        default=None,
        metavar="SECONDS",
        help="its own waits between attempts, e.g. 5,300,1800,7200 (default: the deployment's)",
    )
    add.add_argument(
        "--payload-format",
        choices=PAYLOAD_FORMATS,
        default=None,
        help="the body it receives: raw (the payload as sent) or envelope ({type, timestamp, "
        "data}); default: the application's default, else the deployment's",
    )
    add.add_argument(
        "--max-attempts", type=int, default=None, help="deprecated: use --retry-schedule"
    )
    add.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="how long a delivery waits for the receiver (default: the deployment's HTTP timeout)",
    )
    add.add_argument(
        "--max-in-flight",
        type=max_in_flight_arg,
        default=None,
        metavar="N",
        help="its own cap on deliveries in flight at once, 1..1000, in either lane (default: "
        "none; in the slow lane, TIDINGS_SLOW_LANE_MAX_IN_FLIGHT)",
    )
    add_ordering_options(add, update=False)
    add_routing_options(add, update=False)
    add_credential_options(add, update=False)
    _common(add, run_add)

    listing = actions.add_parser("list", help="list endpoints")
    _common(listing, run_list)

    show = actions.add_parser("show", help="one endpoint, with the retry schedule it follows")
    show.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    _common(show, run_show)

    _register_update(actions)

    recover = actions.add_parser(
        "recover",
        help="send again every message of an endpoint since a time that is not delivered",
    )
    recover.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    recover.add_argument(
        "--since",
        type=time_arg,
        required=True,
        metavar="TIME",
        help="created at or after TIME: ISO 8601 (UTC unless zoned) or an age (30m, 2h, 7d)",
    )
    recover.add_argument(
        "--until", type=time_arg, default=None, metavar="TIME", help="created before TIME"
    )
    recover.add_argument(
        "--batch-size",
        type=batch_size_arg,
        default=None,
        metavar="N",
        help="messages per transaction (1 to 10000; default 1000); the database mode's, the API "
        "sets its own",
    )
    _common(recover, run_recover)

    lines = actions.add_parser(
        "lines",
        help="a FIFO endpoint's lines with a message on its way (or paused): each one's head "
        "and how many messages wait behind it",
    )
    lines.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    lines.add_argument(
        "--paused", action="store_true", help="only the lines paused at a dead letter"
    )
    _common(lines, run_lines)

    resume = actions.add_parser(
        "resume",
        help="resume a FIFO endpoint's lines paused at a dead letter (every one, or those "
        "named): each goes on with the message behind its dead letter",
    )
    resume.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    resume.add_argument(
        "--ordering-key",
        dest="ordering_keys",
        action="append",
        default=None,
        metavar="KEY",
        help="resume the line of this ordering key; repeat for more (default: every paused line)",
    )
    resume.add_argument(
        "--no-key",
        action="store_true",
        help="resume the line of the events sent without an ordering key",
    )
    _common(resume, run_resume)

    enable = actions.add_parser(
        "enable",
        help="deliver to an endpoint again (then replay or recover what was dead-lettered)",
    )
    enable.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    _common(enable, run_enable)

    disable = actions.add_parser("disable", help="stop delivering to an endpoint")
    disable.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    _common(disable, run_disable)

    delete = actions.add_parser(
        "delete", help="delete an endpoint for good (its messages and attempts are kept)"
    )
    delete.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    _common(delete, run_delete)

    rotate = actions.add_parser(
        "rotate-secret",
        help="new signing secret; earlier ones keep signing for their overlap (5 at most)",
    )
    rotate.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    _common(rotate, run_rotate)


def _register_update(actions: Any) -> None:
    update = actions.add_parser(
        "update",
        help="change an endpoint's URL, description, event types, filter, channels, retry "
        "schedule, payload format, cap on deliveries in flight, rate limit, timeout, ordering or "
        "receiver credentials",
    )
    update.add_argument("endpoint_id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    update.add_argument(
        "--url",
        default=_KEEP,
        metavar="URL",
        help="deliver to URL from now on (the same rules as endpoints add; queued messages go "
        "there too)",
    )
    update.add_argument("--description", default=_KEEP, help="a note for people")
    update.add_argument(
        "--event-type",
        dest="event_types",
        action="append",
        default=None,
        metavar="TYPE",
        help="the event types it receives from now on, replacing its own ('*' for all); "
        "repeat for more",
    )
    update.add_argument(
        "--retry-schedule",
        type=retry_schedule_arg,
        default=_KEEP,
        metavar="SECONDS",
        help="its own waits between attempts, e.g. 5,300,1800 ('default': the deployment's)",
    )
    update.add_argument(
        "--payload-format",
        choices=PAYLOAD_FORMATS,
        default=_KEEP,
        help="the body it receives: raw or envelope",
    )
    update.add_argument(
        "--max-in-flight",
        type=max_in_flight_arg,
        default=_KEEP,
        metavar="N",
        help="its own cap on deliveries in flight at once, 1..1000 ('default': none of its own)",
    )
    update.add_argument(
        "--rate-limit",
        type=rate_limit_arg,
        default=_KEEP,
        metavar="PER_SECOND",
        help="requests per second to it, at least one a minute ('default': no limit)",
    )
    update.add_argument(
        "--timeout-ms",
        type=timeout_ms_arg,
        default=_KEEP,
        metavar="MS",
        help="how long a delivery waits for the receiver, 100..60000 ('default': the "
        "deployment's HTTP timeout)",
    )
    add_ordering_options(update, update=True)
    add_routing_options(update, update=True)
    add_credential_options(update, update=True)
    _common(update, run_update)


def _common(parser: argparse.ArgumentParser, handler: Any) -> None:
    """What every endpoints command takes: --json, --app, the API's options; and its handler."""
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser)
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=handler)


def run_add(args: argparse.Namespace) -> int:
    fields = {
        "url": args.url,
        "event_types": args.event_types,
        "description": args.description,
        "max_attempts": args.max_attempts,
        "timeout_ms": args.timeout_ms,
        "rate_limit_per_s": args.rate_limit,
        "retry_schedule": _whole_seconds(args.retry_schedule),
        "payload_format": args.payload_format,
        "max_in_flight": args.max_in_flight,
        "filter": args.filter,
        "channels": args.channels,
        "ordering": args.ordering,
        "fifo_batch_size": args.fifo_batch_size,
        "fifo_on_dead_letter": args.fifo_on_dead_letter,
        **credential_fields(args),
    }
    with backend_for(args) as backend:
        added = backend.add_endpoint(args.app, fields)
    created = added.endpoint
    if args.json:
        print_json(created)
        return 0
    print(f"endpoint {created.id} added to application {app_name(args)}: {created.url}")
    print(f"  event types: {', '.join(created.event_types)}")
    if created.filter is not None:
        print(f"  filter:      {_compact(created.filter)}")
    if created.channels:
        print(f"  channels:    {', '.join(created.channels)}")
    print(f"  retries:     {describe_schedule(created.retry_schedule)}")
    print(f"  body:        {created.payload_format}")
    print(f"  lane:        {describe_lane(created)}")
    if created.ordering == "fifo":
        print(f"  ordering:    {describe_ordering(created)}")
    print(f"  secret:      {created.secret}")
    print("  (the secret is shown this once; keep it to verify signatures)")
    if added.secrets_notice:
        print(f"  ({added.secrets_notice})")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.endpoints(args.app)
    if args.json:
        print_json(found)
        return 0
    if not found:
        print(f"no endpoints in application {app_name(args)}")
        return 0
    rows: list[list[object]] = [
        [
            e.id,
            e.url,
            ", ".join(e.event_types),
            "enabled" if e.enabled else f"disabled ({e.disabled_reason or 'by an operator'})",
            e.rate_limit_per_s,
            e.max_in_flight,
            e.lane,
            _short_ordering(e),
            when(e.created_at),
        ]
        for e in found
    ]
    headers = ("id", "url", "event types", "state", "rate/s", "max in flight", "lane", "ordering")
    print(table((*headers, "created (UTC)"), rows))
    return 0


def run_show(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.endpoint(args.app, args.endpoint_id)
    if args.json:
        print_json(found)
        return 0
    source = {
        "endpoint": "its own",
        "max_attempts": f"the deployment's, for {found.max_attempts} attempts",
        "default": "the deployment's",
    }.get(found.retry_schedule_source, found.retry_schedule_source)
    facts: list[tuple[str, object]] = [
        ("endpoint", found.id),
        ("url", found.url),
        ("description", found.description or "-"),
        ("event types", ", ".join(found.event_types)),
        ("filter", "-" if found.filter is None else _compact(found.filter)),
        ("channels", ", ".join(found.channels) or "- (events of its types, whatever theirs)"),
        ("state", "enabled" if found.enabled else f"disabled ({found.disabled_reason or '-'})"),
        ("retries", f"{describe_schedule(found.retry_schedule)}: {source}"),
        ("rate limit", f"{found.rate_limit_per_s:g}/s" if found.rate_limit_per_s else "-"),
        ("timeout", f"{found.timeout_ms} ms" if found.timeout_ms else "the deployment's"),
        ("body", found.payload_format),
        ("max in flight", found.max_in_flight or "- (none of its own)"),
        ("lane", describe_lane(found)),
        *_ordering_facts(found),
        *describe_credentials(found),
        ("created", when(found.created_at)),
        ("updated", when(found.updated_at)),
    ]
    width = max(len(name) for name, _ in facts)
    for name, value in facts:
        print(f"{name.ljust(width)}  {value}")
    return 0


def _ordering_facts(endpoint: Any) -> list[tuple[str, object]]:
    """What ``show`` prints of the endpoint's ordering."""
    if endpoint.ordering != "fifo":
        return [("ordering", describe_ordering(endpoint))]
    size = endpoint.fifo_batch_size
    on_dead_letter = (
        f"pause (its line waits at it: tidings endpoints resume {endpoint.id})"
        if endpoint.fifo_on_dead_letter == "pause"
        else "continue (its line goes on)"
    )
    paused = (
        f"{endpoint.paused_lines} (see tidings endpoints lines {endpoint.id} --paused)"
        if endpoint.paused_lines
        else "0"
    )
    return [
        ("ordering", "fifo (in the order accepted, one line per ordering key)"),
        ("fifo batch size", "1 (one message a request)" if size == 1 else f"up to {size}"),
        ("on dead letter", on_dead_letter),
        ("paused lines", paused),
    ]


def run_update(args: argparse.Namespace) -> int:
    changes = {
        name: value
        for name, value in (
            ("url", args.url),
            ("description", args.description),
            ("event_types", _KEEP if args.event_types is None else args.event_types),
            ("retry_schedule", args.retry_schedule),
            ("max_in_flight", args.max_in_flight),
            ("payload_format", args.payload_format),
            ("rate_limit_per_s", args.rate_limit),
            ("timeout_ms", args.timeout_ms),
            ("filter", args.filter),
            ("channels", _channel_change(args)),
            ("ordering", args.ordering),
            ("fifo_batch_size", args.fifo_batch_size),
            ("fifo_on_dead_letter", args.fifo_on_dead_letter),
        )
        if value is not _KEEP
    }
    if "retry_schedule" in changes:
        changes["retry_schedule"] = _whole_seconds(changes["retry_schedule"])
    credentials = credential_fields(args)
    if not changes and not credentials:
        raise UsageError(
            "nothing to change: give --url, --description, --event-type, --filter, --channel, "
            "--no-channels, --retry-schedule, --payload-format, --max-in-flight, --rate-limit, "
            "--timeout-ms, --ordering, --fifo-batch-size, --fifo-on-dead-letter or a receiver "
            "credential option"
        )
    with backend_for(args) as backend:
        changed = backend.update_endpoint(args.app, args.endpoint_id, {**changes, **credentials})
    if args.json:
        print_json(changed)
        return 0
    _print_update(changed, changes, credentials)
    return 0


def _print_update(changed: Any, changes: dict[str, Any], credentials: dict[str, Any]) -> None:
    """A line for each field the update changed, as people read it."""
    if "url" in changes:
        print(f"endpoint {changed.id}: url {changed.url}")
    if "description" in changes:
        print(f"endpoint {changed.id}: description {changed.description or '-'}")
    if "event_types" in changes:
        print(f"endpoint {changed.id}: event types {', '.join(changed.event_types)}")
    if "filter" in changes:
        shown = "none" if changed.filter is None else _compact(changed.filter)
        print(f"endpoint {changed.id}: filter {shown}")
    if "channels" in changes:
        print(f"endpoint {changed.id}: channels {', '.join(changed.channels) or 'none'}")
    if "retry_schedule" in changes:
        print(f"endpoint {changed.id}: retries {describe_schedule(changed.retry_schedule)}")
    if "payload_format" in changes:
        print(f"endpoint {changed.id}: body {changed.payload_format}")
    if "max_in_flight" in changes:
        cap = changed.max_in_flight or "none of its own"
        print(f"endpoint {changed.id}: max in flight {cap}; lane {describe_lane(changed)}")
    if "rate_limit_per_s" in changes:
        limit = changed.rate_limit_per_s
        print(f"endpoint {changed.id}: rate limit {'none' if limit is None else f'{limit:g}/s'}")
    if "timeout_ms" in changes:
        timeout = "the deployment's" if changed.timeout_ms is None else f"{changed.timeout_ms} ms"
        print(f"endpoint {changed.id}: timeout {timeout}")
    _print_ordering_update(changed, changes)
    for name, value in credentials.items():
        print(f"endpoint {changed.id}: {name} {'removed' if value is None else 'set'}")
    for name, value in describe_credentials(changed):
        print(f"  {name}: {value}")


def _print_ordering_update(changed: Any, changes: dict[str, Any]) -> None:
    if "ordering" in changes:
        print(f"endpoint {changed.id}: ordering {describe_ordering(changed)}")
    # A FIFO option of an endpoint without ordering waits for its ordering to be fifo.
    unused = "" if changed.ordering == "fifo" else " (used once its ordering is fifo)"
    if "fifo_batch_size" in changes:
        print(f"endpoint {changed.id}: fifo batch size {changed.fifo_batch_size}{unused}")
    if "fifo_on_dead_letter" in changes:
        print(f"endpoint {changed.id}: fifo on dead letter {changed.fifo_on_dead_letter}{unused}")


def _channel_change(args: argparse.Namespace) -> Any:
    if args.no_channels and args.channels:
        raise UsageError("give --channel or --no-channels, not both")
    if args.no_channels:
        return None
    return _KEEP if args.channels is None else args.channels


def _compact(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def run_recover(args: argparse.Namespace) -> int:
    display = LiveDisplay(sys.stderr, every_s=2.0)

    def progress(done: int, total: int) -> None:
        if not args.json:
            display.show(f"recovering endpoint {args.endpoint_id} " + progress_bar(done, total))

    with backend_for(args) as backend:
        result = backend.recover_endpoint(
            args.app,
            args.endpoint_id,
            since=args.since,
            until=args.until,
            batch_size=args.batch_size,
            progress=progress,
        )
    if args.json:
        print_json(result)
        return 0
    if result.matched:
        display.show(
            f"recovering endpoint {args.endpoint_id} "
            + progress_bar(result.matched, result.matched),
            final=True,
        )
    # A message can leave those states between the look-up and its batch (delivered, replayed).
    print(
        f"endpoint {result.endpoint_id}: sent {result.requeued} of {result.matched} undelivered "
        f"message(s) created {when(result.since)} to {when(result.until)} UTC again"
    )
    return 0


def run_lines(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.lines(args.app, args.endpoint_id, paused=args.paused)
    if args.json:
        print_json(found)
        return 0
    if not found:
        what = "is paused" if args.paused else "has a message on its way"
        print(
            f"no line of endpoint {args.endpoint_id} {what} (only FIFO endpoints have lines; "
            "see tidings endpoints show)"
        )
        return 0
    rows: list[list[object]] = [
        [
            _key_name(line.ordering_key),
            line.head_message_id,
            line.head_status or "-",
            line.head_attempts,
            line.waiting,
            when(line.paused_at),
        ]
        for line in found
    ]
    headers = ("ordering key", "head message", "head status", "attempts", "waiting")
    print(table((*headers, "paused at (UTC)"), rows))
    return 0


def run_resume(args: argparse.Namespace) -> int:
    named: list[str | None] | None = None
    if args.ordering_keys is not None or args.no_key:
        given: list[str | None] = [*(args.ordering_keys or ()), *([None] if args.no_key else [])]
        # Each line once, in the order given.
        named = list(dict.fromkeys(given))
    with backend_for(args) as backend:
        result = backend.resume_lines(args.app, args.endpoint_id, named)
    if args.json:
        print_json(result)
        return 0
    if result.resumed:
        keys = ", ".join(_key_name(key) for key in result.resumed)
        print(f"endpoint {result.endpoint_id}: resumed {_lines(len(result.resumed))}: {keys}")
    elif named is None:
        print(f"endpoint {result.endpoint_id}: no line is paused; nothing to resume")
    else:
        print(f"endpoint {result.endpoint_id}: none of the lines named is paused; nothing resumed")
    if result.resumed and named is not None:
        left = [key for key in named if key not in result.resumed]
        if left:
            print(f"  not paused: {', '.join(_key_name(key) for key in left)}")
    return 0


def _key_name(key: str | None) -> str:
    return NO_KEY if key is None else key


def run_enable(args: argparse.Namespace) -> int:
    return _set_enabled(args, enabled=True)


def run_disable(args: argparse.Namespace) -> int:
    return _set_enabled(args, enabled=False)


def _set_enabled(args: argparse.Namespace, *, enabled: bool) -> int:
    with backend_for(args) as backend:
        changed = backend.update_endpoint(args.app, args.endpoint_id, {"enabled": enabled})
    if args.json:
        print_json(changed)
    else:
        print(f"endpoint {changed.id} {'enabled' if enabled else 'disabled'}: {changed.url}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        backend.delete_endpoint(args.app, args.endpoint_id)
    if args.json:
        print_json({"endpoint_id": args.endpoint_id, "deleted": True})
    else:
        print(f"endpoint {args.endpoint_id} deleted (its messages and attempts are kept)")
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        rotated = backend.rotate_secret(args.app, args.endpoint_id)
    if args.json:
        print_json(rotated)
        return 0
    print(f"endpoint {rotated.endpoint_id}: new secret {rotated.secret}")
    if rotated.previous_secret_expires_at is not None:
        print(
            "  the previous secret keeps signing until "
            f"{when(rotated.previous_secret_expires_at)} UTC"
        )
    return 0


def _whole_seconds(schedule: tuple[float, ...] | None) -> list[int] | None:
    """A schedule of delays as the API takes it: whole seconds (as the option is written)."""
    return None if schedule is None else [round(delay) for delay in schedule]
