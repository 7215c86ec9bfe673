"""The API against its committed OpenAPI document, by schemathesis: every operation, with
generated valid and invalid requests, sent over HTTP to the local API server (the token
authorizer, then the ingest function, as API Gateway runs them) with an admin token.

Checks: no server error; status codes, content types and response bodies as documented;
invalid data rejected. A bounded number of examples per operation keeps the run short.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.config._auth import AuthConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.seed import make_application, make_endpoint, seed_messages
from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.api_server import ApiServer
from tidings.local.lambda_env import load_handler
from tidings.logic import tokens

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.json"
EXAMPLES_PER_OPERATION = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

# The admin token the run authenticates with (stored once the database is up), given to
# schemathesis as the document's bearer scheme: generated requests carry it, and the invalid
# ones are invalid in what they send, not in their credentials.
TOKEN = tokens.generate()
schema = schemathesis.openapi.from_path(OPENAPI)
schema.config.generation.update(max_examples=EXAMPLES_PER_OPERATION)
schema.config.auth = AuthConfig(openapi={"bearerToken": {"bearer": TOKEN}})
# The run token's id, once stored.
RUN: dict[str, Any] = {}
# What each operation answered, to show that the run reached the routes and not just the door.
ANSWERS: list[tuple[str, int]] = []


@schema.hook
def filter_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> bool:
    # A generated revocation must not revoke the token the run itself uses: every later
    # request would then be answered 401, which is documented, and prove nothing more.
    return not path_parameters or path_parameters.get("token_id") != RUN.get("token_id")


@pytest.fixture(scope="module")
def api_url(postgres_admin_dsn: str) -> Iterator[str]:
    from tests.conftest import TEMPLATE_DB, _admin_connect, _with_dbname

    name = f"tidings_openapi_{uuid.uuid4().hex[:12]}"
    admin = _admin_connect(postgres_admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    dsn = _with_dbname(postgres_admin_dsn, name)
    db = Database(dsn)
    try:
        with db.cursor() as cur:
            acme = make_application(cur, "acme")
            for app_id in (1, acme):
                endpoint = make_endpoint(cur, "https://93.184.215.14/hook", app_id=app_id)
                seed_messages(cur, endpoint, 3)
            cur.execute(
                "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now()"
                " WHERE id % 3 = 0"
            )
        # Tokens before the run's own, so that its id is none that generation favours (1).
        for _ in range(3):
            tokens.create_token(db, scope="producer")
        tokens.register_token(db, TOKEN, description="the conformance run")
        authenticated = tokens.authenticate(db, TOKEN)
        assert authenticated is not None
        RUN.update(token_id=authenticated.principal.token_id)
        settings = Settings(database_url=dsn)
        with wiring.overridden(settings=settings, database_factory=lambda: Database(dsn)):
            server = ApiServer(
                load_handler("ingest"), "127.0.0.1", 0, authorizer=load_handler("authorizer")
            )
            server.start()
            try:
                yield server.url
            finally:
                server.stop()
        # The run used its token to the end.
        assert tokens.authenticate(db, TOKEN) is not None
    finally:
        db.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


@schema.parametrize()
def test_the_api_answers_as_documented(case: Any, api_url: str) -> None:
    response = case.call_and_validate(base_url=api_url, checks=CHECKS)
    ANSWERS.append((f"{case.operation.method.upper()} {case.operation.path}", response.status_code))


def test_the_conformance_run_covers_every_operation() -> None:
    operations = {
        (op.method.upper(), op.path)
        for result in schema.get_all_operations()
        for op in [result.ok()]
    }
    documented = {
        (method.upper(), path)
        for path, ops in json.loads(OPENAPI.read_text())["paths"].items()
        for method in ops
    }
    assert operations == documented
    assert len(operations) == 46


def test_the_run_was_authenticated_and_reached_every_operation() -> None:
    # Runs after the generated tests (pytest keeps the file's order).
    if not ANSWERS:
        pytest.skip("the conformance run was not selected")
    # Schemathesis also sends some requests without the credential on purpose (401, as
    # documented); the rest carried the run's token and got past the authorizer.
    unauthenticated = [a for a in ANSWERS if a[1] == 401]
    assert len(unauthenticated) < len(ANSWERS) / 4
    answered = {operation for operation, status in ANSWERS if status != 401}
    succeeded = {operation for operation, status in ANSWERS if status < 300}
    assert len(answered) == 46
    # Most operations also succeeded at least once (22 of 33 when this was written). The others
    # need what the generator does not find: an application it may delete (it knows only
    # 'default', which cannot be), or the seeded endpoint 1 after its own DELETE removed it.
    assert len(succeeded) >= 20, sorted(answered - succeeded)
