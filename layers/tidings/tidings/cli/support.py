"""What the operator commands share: which database, use-case errors, JSON output, times."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from uuid import UUID

from tidings.cli import CommandError, UsageError

if TYPE_CHECKING:
    from tidings.config import Settings
    from tidings.dal.connection import Database
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import MasterKey

DEV_DATA_DIR = Path(".tidings")
# The application of everything made without naming one (tidings.dal.applications).
DEFAULT_APP_UID = "default"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class OperatorError(CommandError):
    """The command cannot go on; the message says why (the CLI exits with code 1)."""


@dataclass
class Target:
    """The database a command works on, and the settings that go with it."""

    db: Database
    settings: Settings
    # "DATABASE_URL" or "the dev runtime in <dir>"
    description: str
    _embedded: Any = None

    def close(self) -> None:
        self.db.close()


@contextmanager
def target(data_dir: Path = DEV_DATA_DIR) -> Iterator[Target]:
    """``DATABASE_URL`` when set, else the embedded database of ``tidings dev`` in ``data_dir``.

    Against the dev runtime the dev settings apply (loopback targets allowed), as they do there.
    """
    import psycopg2

    from tidings.config import ConfigError, Settings
    from tidings.dal.connection import Database
    from tidings.local.embedded import EmbeddedPostgres
    from tidings.local.runtime import dev_settings

    try:
        if _configured_database():
            settings = Settings.from_env()
            found = Target(Database.from_settings(settings), settings, "DATABASE_URL")
        else:
            pgdata = data_dir / "pgdata"
            if not (pgdata / "PG_VERSION").exists():
                raise UsageError(
                    f"DATABASE_URL is not set and there is no dev runtime database in {data_dir}/ "
                    "(start one with `tidings dev`)"
                )
            server = EmbeddedPostgres(pgdata)
            settings = dev_settings(database_url=server.dsn)
            found = Target(
                Database(server.dsn), settings, f"the dev runtime in {data_dir}/", server
            )
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    try:
        yield found
    except psycopg2.OperationalError as exc:
        raise OperatorError(
            f"cannot reach the database ({found.description}): {exc}".strip()
        ) from exc
    finally:
        found.close()


def _configured_database() -> bool:
    import os

    return any(
        os.environ.get(name)
        for name in ("DATABASE_URL", "TIDINGS_DATABASE_USER", "TIDINGS_DATABASE_SECRET_ARN")
    )


def keyring_for(target: Target, data_dir: Path = DEV_DATA_DIR, *, create: bool = True) -> Keyring:
    """The keyring of signing secrets for a command: the KMS key when configured, else the local
    key (``TIDINGS_SECRETS_KEY``, else the key file in ``data_dir``, made on first use when
    ``create``)."""
    from tidings.cli import UsageError
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import KeyUnavailable, configured_master_key

    try:
        master = configured_master_key(target.settings, data_dir=data_dir, create=create)
    except KeyUnavailable as exc:
        raise OperatorError(str(exc)) from exc
    except ValueError as exc:
        # A key that is not a key (not base64, the wrong length) is a setting to correct.
        raise UsageError(str(exc)) from exc
    return Keyring(master, data_key_max_age_s=target.settings.secrets_data_key_max_age_s)


def secrets_key_notice(master: MasterKey) -> str:
    """Where the key of the signing secrets is, and that it must be kept."""
    if master.ref.startswith("kms:"):
        return f"signing secrets are encrypted under {master.where}"
    return (
        f"signing secrets are encrypted with the key in {master.where}: keep a copy of it "
        "somewhere safe; without it the stored secrets cannot be read"
    )


@contextmanager
def use_case_errors() -> Iterator[None]:
    """A use case's refusal becomes the command's error: input it cannot take (invalid, too large)
    a usage error (exit code 2), any other refusal (an unknown id, a conflict) a failure (1)."""
    from tidings.logic.errors import InvalidInput, PayloadTooLarge, UseCaseError

    try:
        yield
    except UseCaseError as exc:
        where = f" ({exc.field})" if exc.field else ""
        kind = UsageError if isinstance(exc, InvalidInput | PayloadTooLarge) else OperatorError
        raise kind(f"{exc.message}{where}") from exc


@dataclass(frozen=True)
class AppChoice:
    """The application a command acts in."""

    id: int
    uid: str


def add_app_option(
    parser: Any,
    help_text: str = "the application to act in (its uid or id; default: the default application)",
) -> None:
    parser.add_argument("--app", metavar="UID", default=None, help=help_text)


def app_name(args: Any) -> str:
    """The application ``--app`` names, as given (the default application without it)."""
    return args.app or DEFAULT_APP_UID


def chosen_app(where: Target, ref: str | None) -> AppChoice:
    """The application ``--app`` names (the default application without it)."""
    from tidings.logic import applications

    if ref is None:
        return AppChoice(applications.DEFAULT_APP_ID, applications.DEFAULT_APP_UID)
    found = applications.find(where.db, ref)
    if found is None:
        raise OperatorError(f"application {ref} does not exist (see tidings apps list)")
    return AppChoice(found.id, found.uid)


def parse_duration(text: str) -> timedelta:
    """A positive duration such as ``90s``, ``15m``, ``12h``, ``30d``."""
    match = _RELATIVE.match(text.strip())
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a duration like 15m, 12h or 30d")
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: models, dataclasses, times, decimals and ids included. Times
    are written as the API writes them, so that a command prints what the API answers."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    for kind, convert in _CONVERSIONS:
        if isinstance(value, kind):
            return convert(value)
    return value


def _rfc3339(moment: datetime) -> str:
    """A time as the API writes it: ISO 8601, ``Z`` for UTC."""
    text = moment.isoformat()
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


_CONVERSIONS: tuple[tuple[type, Any], ...] = (
    (datetime, _rfc3339),
    (date, lambda v: v.isoformat()),
    (timedelta, lambda v: v.total_seconds()),
    (Decimal, float),
    (UUID, str),
    (Enum, lambda v: v.value),
)


def write_output(destination: str, text: str) -> None:
    """Writes ``text`` to the file ``destination`` (an -o/--output argument), or to standard
    output when it is ``-``."""
    if destination == "-":
        sys.stdout.write(text)
        return
    try:
        Path(destination).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {destination}: {exc.strerror}") from exc


def print_json(value: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(plain(value), indent=2, ensure_ascii=False) + "\n")


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC when it names no zone) or an age such as ``90s``, ``15m``,
    ``2h``, ``7d`` (that long before now)."""
    moment = now or datetime.now(UTC)
    match = _RELATIVE.match(text.strip())
    if match:
        return moment - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 time nor an age like 15m, 2h or 7d"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def when(value: datetime | None) -> str:
    """A time for people: UTC, to the second."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
