"""The API served over HTTP on loopback as ``tidings dev`` serves it (the token authorizer, then
the ingest function, each loaded from ``functions/`` as Lambda loads it), on a database of the
test's own, and an admin token for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.api_server import ApiServer
from tidings.local.lambda_env import load_handler
from tidings.logic import tokens

# A public address: endpoints on it need no DNS and pass the SSRF rules.
PUBLIC_URL = "https://93.184.215.14/hook"


@dataclass(frozen=True)
class LocalApi:
    url: str
    admin_token: str


@pytest.fixture
def local_api(database_url: str, db: Database) -> Iterator[LocalApi]:
    admin = tokens.create_token(db, scope="admin", description="the client's tests").token
    settings = Settings(database_url=database_url)
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        server = ApiServer(
            load_handler("ingest"), "127.0.0.1", 0, authorizer=load_handler("authorizer")
        )
        server.start()
        try:
            yield LocalApi(server.url, admin)
        finally:
            server.stop()
