"""Where the operator commands act: a database, or a deployed stack's API.

- Over the API (remote mode) when an API URL is given, ``--api-url`` or ``TIDINGS_API_URL``,
  with the bearer token of ``--token`` or ``TIDINGS_TOKEN``: each command is a request of
  ``tidings.client``, scoped by the token as any caller's.
- On the database otherwise: ``DATABASE_URL``, or the dev runtime's (``tidings.cli.support``),
  through the use cases the API runs (the local runtime, and break-glass use).

Both answer with the client's dataclasses (the database's answers go through the JSON the API
would send), so a command prints the same in either mode. Refusals become the command's errors:
input it cannot take (422, 413, 400; a use case's invalid input) exits 2, any other refusal or
failure 1, naming the problem (and, over the API, its reason code and status).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tidings.cli import UsageError
from tidings.cli.support import OperatorError

if TYPE_CHECKING:
    from tidings.cli.support import Target
    from tidings.client import Client
    from tidings.client.models import (
        Application,
        CreatedEndpoint,
        CreatedToken,
        DeadLetterReport,
        Endpoint,
        EventType,
        EventTypeVersion,
        ImportResult,
        Line,
        Message,
        MessageDetail,
        PortalLink,
        RecoverResult,
        ResumedLines,
        RotatedSecret,
        SendResult,
        StatusReport,
        Token,
    )
    from tidings.secrets.keyring import Keyring

T = TypeVar("T")
API_URL_VARIABLE = "TIDINGS_API_URL"
TOKEN_VARIABLE = "TIDINGS_TOKEN"  # noqa: S105 - the variable's name
# Progress of a long operation: (done, of how many).
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ReplayOutcome:
    # Dead letters that matched, counted before the replay (None over the API: it replays in
    # one call and says how many it requeued).
    matched: int | None
    requeued: int


@dataclass(frozen=True)
class EndpointAdded:
    endpoint: CreatedEndpoint
    # Where the key of the signing secrets is (the database mode's; the deployment's own
    # over the API).
    secrets_notice: str | None = None


class Backend(Protocol):
    """What the operator commands ask of either mode. ``app`` is an application's uid or id,
    None for the default one (for ``status`` and ``dead_letters``: every application)."""

    def status(self, app: str | None) -> StatusReport: ...
    def dead_letters(self, window_s: float | None, app: str | None) -> DeadLetterReport: ...
    def create_application(
        self, uid: str, name: str, metadata: Mapping[str, str], default_payload_format: str | None
    ) -> Application: ...
    def applications(self) -> list[Application]: ...
    def delete_application(self, app: str) -> None: ...
    def create_token(
        self, scope: str, app: str | None, description: str, expires_at: datetime | None
    ) -> CreatedToken: ...
    def tokens(self) -> list[Token]: ...
    def revoke_token(self, token_id: int) -> Token: ...
    def create_portal_link(
        self, app: str, read_only: bool, expires_in_s: float | None, base_url: str | None
    ) -> PortalLink: ...
    def add_endpoint(self, app: str | None, fields: Mapping[str, Any]) -> EndpointAdded: ...
    def endpoints(self, app: str | None) -> list[Endpoint]: ...
    def endpoint(self, app: str | None, endpoint_id: int) -> Endpoint: ...
    def update_endpoint(
        self, app: str | None, endpoint_id: int, changes: Mapping[str, Any]
    ) -> Endpoint: ...
    def delete_endpoint(self, app: str | None, endpoint_id: int) -> None: ...
    def rotate_secret(self, app: str | None, endpoint_id: int) -> RotatedSecret: ...
    def recover_endpoint(
        self,
        app: str | None,
        endpoint_id: int,
        *,
        since: datetime,
        until: datetime | None,
        batch_size: int | None,
        progress: Progress,
    ) -> RecoverResult: ...
    def lines(self, app: str | None, endpoint_id: int, *, paused: bool) -> list[Line]: ...
    def resume_lines(
        self, app: str | None, endpoint_id: int, ordering_keys: Sequence[str | None] | None
    ) -> ResumedLines: ...
    def send_event(
        self,
        app: str | None,
        event_type: str,
        payload: Any,
        event_id: str | None,
        *,
        channels: Sequence[str] | None = None,
        ordering_key: str | None = None,
    ) -> SendResult: ...
    def message(self, app: str | None, message_id: int) -> MessageDetail: ...
    def resend_message(self, app: str | None, message_id: int) -> Message: ...
    def messages(
        self, app: str | None, filters: Mapping[str, Any], limit: int
    ) -> list[Message]: ...
    def replay(
        self,
        app: str | None,
        *,
        endpoint_id: int | None,
        since: datetime | None,
        message_ids: Sequence[int] | None,
        progress: Progress,
    ) -> ReplayOutcome: ...
    def event_types(self, *, include_archived: bool) -> list[EventType]: ...
    def event_type(self, name: str) -> EventType: ...
    def event_type_version(self, name: str, version: int) -> EventTypeVersion: ...
    def create_event_type(self, name: str, fields: Mapping[str, Any]) -> EventType: ...
    def update_event_type(self, name: str, changes: Mapping[str, Any]) -> EventType: ...
    def import_event_types(self, document: Any) -> ImportResult: ...
    def send_example(self, app: str | None, endpoint_id: int, event_type: str) -> SendResult: ...


def add_remote_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """``--api-url`` and ``--token``: before the command (``tidings --api-url … status``) or,
    as well, after it (``after_command``: given there, they win)."""
    default = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        "--api-url",
        default=default,
        metavar="URL",
        help=f"act over the API at URL (the stack's IngestApiUrl output; default: "
        f"${API_URL_VARIABLE}), instead of on the database",
    )
    parser.add_argument(
        "--token",
        default=default,
        metavar="TOKEN",
        help=f"the API token for --api-url (default: ${TOKEN_VARIABLE}, which keeps it out of "
        "the process list and the shell's history)",
    )
    if after_command:
        parser.set_defaults(works_over_api=True)


def remote_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """The API URL and token to act with, or None for the database mode."""
    env = os.environ if environ is None else environ
    url = getattr(args, "api_url", None) or env.get(API_URL_VARIABLE) or None
    token = getattr(args, "token", None) or env.get(TOKEN_VARIABLE) or None
    if url is None:
        if getattr(args, "token", None):
            raise UsageError(f"--token goes with --api-url (or ${API_URL_VARIABLE})")
        return None
    if not getattr(args, "works_over_api", False):
        if getattr(args, "api_url", None):
            raise UsageError(
                f"tidings {args.command} works on the database or the local runtime, not over "
                "the API: leave out --api-url"
            )
        # A stack's URL left in the environment does not stop a local command.
        return None
    if token is None:
        raise UsageError(f"--api-url needs a token: --token or ${TOKEN_VARIABLE}")
    return url, token


@contextmanager
def backend_for(args: argparse.Namespace) -> Iterator[Backend]:
    """The backend the arguments and the environment choose, open for the block."""
    remote = remote_settings(args)
    if remote is None:
        from tidings.cli.support import target, use_case_errors

        with target() as where, use_case_errors():
            yield DatabaseBackend(where)
        return
    from tidings.client import ApiError, ApiUnreachable, Client, InvalidRequest, UnexpectedAnswer

    url, token = remote
    try:
        client = Client(url, token)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        with client:
            yield ApiBackend(client)
    except InvalidRequest as exc:
        raise UsageError(str(exc)) from None
    except ApiError as exc:
        raise OperatorError(str(exc)) from None
    except (ApiUnreachable, UnexpectedAnswer) as exc:
        raise OperatorError(str(exc)) from None


# -- over the API ------------------------------------------------------------------------------


class ApiBackend:
    def __init__(self, client: Client) -> None:
        self.client = client

    def _in(self, app: str | None) -> Client:
        return self.client.in_app(app)

    def status(self, app: str | None) -> StatusReport:
        if app is None:
            return self.client.deployment_status()
        return self.client.application_status(app)

    def dead_letters(self, window_s: float | None, app: str | None) -> DeadLetterReport:
        window = None if window_s is None else max(1, round(window_s))
        if app is None:
            return self.client.deployment_dead_letters(window_s=window)
        return self.client.application_dead_letters(app, window_s=window)

    def create_application(
        self, uid: str, name: str, metadata: Mapping[str, str], default_payload_format: str | None
    ) -> Application:
        return self.client.create_application(
            uid, name=name, metadata=metadata, default_payload_format=default_payload_format
        )

    def applications(self) -> list[Application]:
        return list(self.client.iter_applications())

    def delete_application(self, app: str) -> None:
        self.client.delete_application(app)

    def create_token(
        self, scope: str, app: str | None, description: str, expires_at: datetime | None
    ) -> CreatedToken:
        return self.client.create_token(
            scope, application=app, description=description, expires_at=expires_at
        )

    def tokens(self) -> list[Token]:
        return list(self.client.iter_tokens())

    def revoke_token(self, token_id: int) -> Token:
        return self.client.revoke_token(token_id)

    def create_portal_link(
        self, app: str, read_only: bool, expires_in_s: float | None, base_url: str | None
    ) -> PortalLink:
        if base_url is not None:
            raise UsageError(
                "--base-url is for the database mode: over the API, links point at the "
                "deployment's own portal"
            )
        expires = None if expires_in_s is None else max(1, round(expires_in_s))
        return self._in(app).create_portal_link(read_only=read_only, expires_in_s=expires)

    def add_endpoint(self, app: str | None, fields: Mapping[str, Any]) -> EndpointAdded:
        return EndpointAdded(self._in(app).create_endpoint(**fields))

    def endpoints(self, app: str | None) -> list[Endpoint]:
        return list(self._in(app).iter_endpoints())

    def endpoint(self, app: str | None, endpoint_id: int) -> Endpoint:
        return self._in(app).get_endpoint(endpoint_id)

    def update_endpoint(
        self, app: str | None, endpoint_id: int, changes: Mapping[str, Any]
    ) -> Endpoint:
        return self._in(app).update_endpoint(endpoint_id, **changes)

    def delete_endpoint(self, app: str | None, endpoint_id: int) -> None:
        self._in(app).delete_endpoint(endpoint_id)

    def rotate_secret(self, app: str | None, endpoint_id: int) -> RotatedSecret:
        return self._in(app).rotate_secret(endpoint_id)

    def recover_endpoint(
        self,
        app: str | None,
        endpoint_id: int,
        *,
        since: datetime,
        until: datetime | None,
        batch_size: int | None,
        progress: Progress,
    ) -> RecoverResult:
        if batch_size is not None:
            raise UsageError("--batch-size is for the database mode: the API sets its own")
        # The API stops each call after about 20 s; the same window again carries on. The
        # first call matches every undelivered message; each later one, those left.
        first: RecoverResult | None = None
        requeued = 0
        for done in self._in(app).recover_endpoint_fully(endpoint_id, since=since, until=until):
            first = first or done
            requeued += done.requeued
            progress(requeued, first.matched)
        assert first is not None
        return replace(done, matched=first.matched, requeued=requeued)

    def lines(self, app: str | None, endpoint_id: int, *, paused: bool) -> list[Line]:
        return list(self._in(app).iter_lines(endpoint_id, paused=paused))

    def resume_lines(
        self, app: str | None, endpoint_id: int, ordering_keys: Sequence[str | None] | None
    ) -> ResumedLines:
        target = self._in(app)
        if ordering_keys is None:
            return target.resume_lines(endpoint_id)
        keys = list(ordering_keys)
        if not keys:
            raise UsageError("name the lines to resume, or none for every paused line")
        # The API takes at most this many keys a request.
        done = [
            target.resume_lines(endpoint_id, ordering_keys=keys[at : at + RESUME_CHUNK])
            for at in range(0, len(keys), RESUME_CHUNK)
        ]
        return replace(done[0], resumed=[key for answer in done for key in answer.resumed])

    def send_event(
        self,
        app: str | None,
        event_type: str,
        payload: Any,
        event_id: str | None,
        *,
        channels: Sequence[str] | None = None,
        ordering_key: str | None = None,
    ) -> SendResult:
        return self._in(app).send_event(
            event_type, payload, event_id=event_id, channels=channels, ordering_key=ordering_key
        )

    def message(self, app: str | None, message_id: int) -> MessageDetail:
        return self._in(app).get_message(message_id)

    def resend_message(self, app: str | None, message_id: int) -> Message:
        return self._in(app).resend_message(message_id)

    def messages(self, app: str | None, filters: Mapping[str, Any], limit: int) -> list[Message]:
        found: list[Message] = []
        for message in self._in(app).iter_messages(**filters):
            found.append(message)
            if len(found) >= limit:
                break
        return found

    def replay(
        self,
        app: str | None,
        *,
        endpoint_id: int | None,
        since: datetime | None,
        message_ids: Sequence[int] | None,
        progress: Progress,
    ) -> ReplayOutcome:
        target = self._in(app)
        if message_ids is None:
            chunks: list[list[int] | None] = [None]
        else:
            # The API takes at most this many ids a request.
            ids = list(message_ids)
            chunks = [ids[at : at + REPLAY_CHUNK] for at in range(0, len(ids), REPLAY_CHUNK)]
        requeued = sum(
            target.replay_dead_letters(
                message_ids=chunk, endpoint_id=endpoint_id, since=since
            ).requeued
            for chunk in chunks
        )
        return ReplayOutcome(matched=None, requeued=requeued)

    def event_types(self, *, include_archived: bool) -> list[EventType]:
        return list(self.client.iter_event_types(include_archived=include_archived))

    def event_type(self, name: str) -> EventType:
        return self.client.get_event_type(name)

    def event_type_version(self, name: str, version: int) -> EventTypeVersion:
        return self.client.get_event_type_version(name, version)

    def create_event_type(self, name: str, fields: Mapping[str, Any]) -> EventType:
        return self.client.create_event_type(name, **fields)

    def update_event_type(self, name: str, changes: Mapping[str, Any]) -> EventType:
        return self.client.update_event_type(name, **changes)

    def import_event_types(self, document: Any) -> ImportResult:
        if not isinstance(document, dict):
            raise UsageError("the document must be a JSON object")
        return self.client.import_event_types(document)

    def send_example(self, app: str | None, endpoint_id: int, event_type: str) -> SendResult:
        return self._in(app).send_example(endpoint_id, event_type)


# Replays go through the use case (or the API) this many messages at a time: its limit for
# listed ids.
REPLAY_CHUNK = 1000
# Lines are resumed over the API this many ordering keys at a time: its limit.
RESUME_CHUNK = 100


# -- on the database ---------------------------------------------------------------------------


@dataclass
class DatabaseBackend:
    where: Target
    _keyring: Keyring | None = field(default=None, repr=False)

    def _app(self, ref: str | None) -> Any:
        from tidings.cli.support import chosen_app

        return chosen_app(self.where, ref)

    def _keys(self) -> Keyring:
        from tidings.cli.support import keyring_for

        if self._keyring is None:
            self._keyring = keyring_for(self.where)
        return self._keyring

    def status(self, app: str | None) -> StatusReport:
        from tidings.client.models import StatusReport
        from tidings.logic import status

        scope = None if app is None else self._app(app)
        return as_api_answer(
            StatusReport, status.status_report(self.where.db, self.where.settings, scope)
        )

    def dead_letters(self, window_s: float | None, app: str | None) -> DeadLetterReport:
        from tidings.client.models import DeadLetterReport
        from tidings.logic import status

        scope = None if app is None else self._app(app)
        built = status.dead_letter_report(self.where.db, self.where.settings, window_s, scope)
        return as_api_answer(DeadLetterReport, built)

    def create_application(
        self, uid: str, name: str, metadata: Mapping[str, str], default_payload_format: str | None
    ) -> Application:
        from tidings.client.models import Application
        from tidings.logic import applications

        created = applications.create_application(
            self.where.db,
            uid=uid,
            name=name,
            metadata=metadata,
            default_payload_format=default_payload_format,
        )
        return as_api_answer(Application, created)

    def applications(self) -> list[Application]:
        from tidings.client.models import Application
        from tidings.logic import applications

        return [
            as_api_answer(Application, a)
            for a in _every(lambda c: applications.list_applications(self.where.db, cursor=c))
        ]

    def delete_application(self, app: str) -> None:
        from tidings.logic import applications
        from tidings.logic.errors import NotFound

        found = applications.find(self.where.db, app)
        if found is None:
            raise NotFound("application", app)
        applications.delete_application(self.where.db, found)

    def create_token(
        self, scope: str, app: str | None, description: str, expires_at: datetime | None
    ) -> CreatedToken:
        from tidings.client.models import CreatedToken
        from tidings.logic import tokens

        created = tokens.create_token(
            self.where.db,
            scope=scope,
            application=app,
            description=description,
            expires_at=expires_at,
        )
        return as_api_answer(CreatedToken, created)

    def tokens(self) -> list[Token]:
        from tidings.client.models import Token
        from tidings.logic import tokens

        listed = _every(lambda c: tokens.list_tokens(self.where.db, cursor=c))
        return [as_api_answer(Token, t) for t in listed]

    def revoke_token(self, token_id: int) -> Token:
        from tidings.client.models import Token
        from tidings.logic import tokens

        return as_api_answer(Token, tokens.revoke_token(self.where.db, token_id))

    def create_portal_link(
        self, app: str, read_only: bool, expires_in_s: float | None, base_url: str | None
    ) -> PortalLink:
        from tidings.client.models import PortalLink
        from tidings.logic import applications, portal
        from tidings.logic.errors import NotFound

        found = applications.find(self.where.db, app)
        if found is None:
            raise NotFound("application", app)
        base = base_url or self.where.settings.portal_url
        if not base:
            if self.where.description == "DATABASE_URL":
                raise UsageError(
                    "the portal's address is unknown: set TIDINGS_PORTAL_URL or pass --base-url "
                    "(the API's URL followed by /portal), or act over the API (--api-url)"
                )
            base = DEV_PORTAL_URL
        link = portal.create_link(
            self.where.db,
            found.id,
            found.uid,
            base_url=base,
            read_only=read_only,
            expires_in_s=portal.DEFAULT_LINK_S if expires_in_s is None else expires_in_s,
            settings=self.where.settings,
        )
        return as_api_answer(PortalLink, link)

    def add_endpoint(self, app: str | None, fields: Mapping[str, Any]) -> EndpointAdded:
        from tidings.cli.support import secrets_key_notice
        from tidings.client.models import CreatedEndpoint
        from tidings.logic import endpoints

        keyring = self._keys()
        created = endpoints.create_endpoint(
            self.where.db,
            keyring=keyring,
            app_id=self._app(app).id,
            settings=self.where.settings,
            **{
                "event_types": ("*",),
                "description": "",
                **{name: value for name, value in fields.items() if value is not None},
            },
        )
        return EndpointAdded(
            as_api_answer(CreatedEndpoint, created), secrets_key_notice(keyring.master)
        )

    def endpoints(self, app: str | None) -> list[Endpoint]:
        from tidings.client.models import Endpoint
        from tidings.logic import endpoints

        app_id = self._app(app).id
        return [
            as_api_answer(Endpoint, e)
            for e in _every(
                lambda c: endpoints.list_endpoints(
                    self.where.db, cursor=c, app_id=app_id, settings=self.where.settings
                )
            )
        ]

    def endpoint(self, app: str | None, endpoint_id: int) -> Endpoint:
        from tidings.client.models import Endpoint
        from tidings.logic import endpoints

        found = endpoints.get_endpoint(
            self.where.db, endpoint_id, app_id=self._app(app).id, settings=self.where.settings
        )
        return as_api_answer(Endpoint, found)

    def update_endpoint(
        self, app: str | None, endpoint_id: int, changes: Mapping[str, Any]
    ) -> Endpoint:
        from tidings.client.models import Endpoint
        from tidings.logic import endpoints

        credentials = {"headers", "auth", "tls_client_certificate", "tls_server_ca_pem"}
        changed = endpoints.update_endpoint(
            self.where.db,
            endpoint_id,
            changes,
            settings=self.where.settings,
            app_id=self._app(app).id,
            keyring=self._keys() if credentials & set(changes) else None,
        )
        return as_api_answer(Endpoint, changed)

    def delete_endpoint(self, app: str | None, endpoint_id: int) -> None:
        from tidings.logic import endpoints

        endpoints.delete_endpoint(self.where.db, endpoint_id, app_id=self._app(app).id)

    def rotate_secret(self, app: str | None, endpoint_id: int) -> RotatedSecret:
        from tidings.client.models import RotatedSecret
        from tidings.logic import endpoints

        rotated = endpoints.rotate_secret(
            self.where.db,
            endpoint_id,
            keyring=self._keys(),
            settings=self.where.settings,
            app_id=self._app(app).id,
        )
        return as_api_answer(RotatedSecret, rotated)

    def recover_endpoint(
        self,
        app: str | None,
        endpoint_id: int,
        *,
        since: datetime,
        until: datetime | None,
        batch_size: int | None,
        progress: Progress,
    ) -> RecoverResult:
        from tidings.client.models import RecoverResult
        from tidings.logic.resend import RECOVER_BATCH_SIZE, recover_endpoint

        result = recover_endpoint(
            self.where.db,
            endpoint_id,
            since=since,
            until=until,
            batch_size=RECOVER_BATCH_SIZE if batch_size is None else batch_size,
            progress=progress,
            app_id=self._app(app).id,
        )
        return as_api_answer(RecoverResult, result)

    def lines(self, app: str | None, endpoint_id: int, *, paused: bool) -> list[Line]:
        from tidings.client.models import Line
        from tidings.logic import lines

        app_id = self._app(app).id
        return [
            as_api_answer(Line, line)
            for line in _every(
                lambda c: lines.list_lines(
                    self.where.db, endpoint_id, paused=paused, cursor=c, limit=100, app_id=app_id
                )
            )
        ]

    def resume_lines(
        self, app: str | None, endpoint_id: int, ordering_keys: Sequence[str | None] | None
    ) -> ResumedLines:
        from tidings.client.models import ResumedLines
        from tidings.logic import lines

        resumed = lines.resume_lines(
            self.where.db, endpoint_id, ordering_keys=ordering_keys, app_id=self._app(app).id
        )
        return as_api_answer(ResumedLines, resumed)

    def send_event(
        self,
        app: str | None,
        event_type: str,
        payload: Any,
        event_id: str | None,
        *,
        channels: Sequence[str] | None = None,
        ordering_key: str | None = None,
    ) -> SendResult:
        from tidings.client.models import SendResult
        from tidings.logic import events

        chosen = self._app(app)
        result = events.send_event(
            self.where.db,
            application=None if app is None else chosen.uid,
            event_type=event_type,
            payload=payload,
            event_id=event_id,
            channels=channels,
            ordering_key=ordering_key,
            settings=self.where.settings,
        )
        return as_api_answer(SendResult, result)

    def message(self, app: str | None, message_id: int) -> MessageDetail:
        from tidings.client.models import MessageDetail
        from tidings.logic import messages

        found = messages.get_message(
            self.where.db, message_id, app_id=self._app(app).id, settings=self.where.settings
        )
        return as_api_answer(MessageDetail, found)

    def resend_message(self, app: str | None, message_id: int) -> Message:
        from tidings.client.models import Message
        from tidings.logic.resend import resend_message

        return as_api_answer(
            Message, resend_message(self.where.db, message_id, app_id=self._app(app).id)
        )

    def messages(self, app: str | None, filters: Mapping[str, Any], limit: int) -> list[Message]:
        from tidings.client.models import Message
        from tidings.logic import messages

        app_id = self._app(app).id
        found: list[Message] = []
        cursor: str | None = None
        while len(found) < limit:
            page = messages.list_messages(
                self.where.db,
                cursor=cursor,
                limit=min(100, limit - len(found)),
                app_id=app_id,
                **filters,
            )
            found.extend(as_api_answer(Message, m) for m in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    def replay(
        self,
        app: str | None,
        *,
        endpoint_id: int | None,
        since: datetime | None,
        message_ids: Sequence[int] | None,
        progress: Progress,
    ) -> ReplayOutcome:
        from tidings.dal.dead_letters import dead_letter_ids
        from tidings.logic.replay import check_named, replay_dead_letters

        chosen = self._app(app)
        db = self.where.db
        check_named(db, chosen.id, message_ids=message_ids, endpoint_id=endpoint_id)
        # Listed up front, so that a long replay can show its progress.
        wanted = db.run(
            lambda cur: dead_letter_ids(
                cur, chosen.id, endpoint_id=endpoint_id, since=since, ids=message_ids
            )
        )
        requeued = 0
        for start in range(0, len(wanted), REPLAY_CHUNK):
            chunk = wanted[start : start + REPLAY_CHUNK]
            requeued += replay_dead_letters(db, message_ids=chunk, app_id=chosen.id).requeued
            progress(start + len(chunk), len(wanted))
        return ReplayOutcome(matched=len(wanted), requeued=requeued)

    def event_types(self, *, include_archived: bool) -> list[EventType]:
        from tidings.client.models import EventType
        from tidings.logic import event_types

        return [
            as_api_answer(EventType, t)
            for t in _every(
                lambda c: event_types.list_event_types(
                    self.where.db, cursor=c, limit=100, include_archived=include_archived
                )
            )
        ]

    def event_type(self, name: str) -> EventType:
        from tidings.client.models import EventType
        from tidings.logic import event_types

        return as_api_answer(EventType, event_types.get_event_type(self.where.db, name))

    def event_type_version(self, name: str, version: int) -> EventTypeVersion:
        from tidings.client.models import EventTypeVersion
        from tidings.logic import event_types

        found = event_types.get_version(self.where.db, name, version)
        return as_api_answer(EventTypeVersion, found)

    def create_event_type(self, name: str, fields: Mapping[str, Any]) -> EventType:
        from tidings.client.models import EventType
        from tidings.logic import event_types

        created = event_types.create_event_type(
            self.where.db, {"name": name, **fields}, settings=self.where.settings
        )
        return as_api_answer(EventType, created)

    def update_event_type(self, name: str, changes: Mapping[str, Any]) -> EventType:
        from tidings.client.models import EventType
        from tidings.logic import event_types

        changed = event_types.update_event_type(
            self.where.db, name, changes, settings=self.where.settings
        )
        return as_api_answer(EventType, changed)

    def import_event_types(self, document: Any) -> ImportResult:
        from tidings.client.models import ImportResult
        from tidings.logic import event_types

        result = event_types.import_document(self.where.db, document, settings=self.where.settings)
        return as_api_answer(ImportResult, result)

    def send_example(self, app: str | None, endpoint_id: int, event_type: str) -> SendResult:
        from tidings.client.models import SendResult
        from tidings.logic import event_types

        chosen = self._app(app)
        name, event_id, message_id = event_types.send_example(
            self.where.db,
            endpoint_id,
            event_type,
            app_id=chosen.id,
            application=None if app is None else chosen.uid,
            settings=self.where.settings,
        )
        return SendResult(
            event_type=name, event_id=event_id, created=True, message_ids=[message_id]
        )


DEV_PORTAL_URL = "http://127.0.0.1:8080/portal"


def as_api_answer(kind: type[T], model: Any) -> T:
    """A use case's answer as the API would send it, read as the client reads it."""
    from tidings.client.decoding import decode

    return decode(kind, model.model_dump(mode="json"))


def _every(page_at: Callable[[str | None], Any]) -> Iterator[Any]:
    cursor: str | None = None
    while True:
        page = page_at(cursor)
        yield from page.items
        cursor = page.next_cursor
        if cursor is None:
            return
