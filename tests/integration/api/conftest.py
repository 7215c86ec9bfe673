"""Driving the ingest handler with API Gateway (REST, proxy) events against a real database."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from tidings import wiring
from tidings.api.app import handle
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.logic.access import Principal, Scope

# A public address: creating endpoints on it needs no DNS and passes the SSRF rules.
PUBLIC_URL = "https://93.184.215.14/hook"
# What the authorizer hands the ingest function for an admin token.
ADMIN = Principal(Scope.ADMIN, token_id=1)


@dataclass
class Reply:
    status: int
    body: Any
    raw: str

    @property
    def error(self) -> dict[str, Any]:
        assert isinstance(self.body, dict) and "error" in self.body, self.raw
        return dict(self.body["error"])


def api_event(
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    raw_body: str | None = None,
    base64_encoded: bool = False,
    content_type: str | None = "application/json",
    principal: Principal | None = ADMIN,
) -> dict[str, Any]:
    """The proxy event API Gateway hands the ingest function, after its authorizer accepted a
    token of ``principal`` (None: no authorizer context at all)."""
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    authorizer = None if principal is None else {"principalId": "test", **principal.context()}
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {} if content_type is None else {"Content-Type": content_type},
        "multiValueHeaders": {} if content_type is None else {"Content-Type": [content_type]},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": f"/prod{path}",
            "stage": "prod",
            "requestId": "test-request",
            "identity": {"sourceIp": "203.0.113.9"},
            "authorizer": authorizer,
        },
        "body": text,
        "isBase64Encoded": base64_encoded,
    }


class Api:
    """Calls the handler as API Gateway would, for a token of ``principal``, and decodes the
    answer."""

    def __init__(self, principal: Principal | None = ADMIN) -> None:
        self.principal = principal

    def as_(self, principal: Principal | None) -> Api:
        """The same API, called with another token's principal."""
        return Api(principal)

    def call(self, method: str, path: str, body: Any = None, **options: Any) -> Reply:
        options.setdefault("principal", self.principal)
        response = handle(api_event(method, path, body, **options), None)  # type: ignore[arg-type]
        raw = response.get("body") or ""
        if response.get("isBase64Encoded"):
            raw = base64.b64decode(raw).decode()
        return Reply(response["statusCode"], json.loads(raw) if raw else None, raw)

    def get(self, path: str, query: dict[str, str] | None = None) -> Reply:
        return self.call("GET", path, query=query)

    def post(self, path: str, body: Any = None, **options: Any) -> Reply:
        return self.call("POST", path, body, **options)

    def patch(self, path: str, body: Any) -> Reply:
        return self.call("PATCH", path, body)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)

    def create_endpoint(self, **fields: Any) -> dict[str, Any]:
        reply = self.post("/v1/endpoints", {"url": PUBLIC_URL, **fields})
        assert reply.status == 201, reply.raw
        return dict(reply.body)


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def api(database_url: str, settings: Settings) -> Iterator[Api]:
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        yield Api()


def count(db: Database, table: str) -> int:
    with db.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM tidings.{table}")
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def query_string(params: dict[str, str]) -> str:
    return urlencode(params)


class Gateway:
    """Requests through what API Gateway runs on AWS and the local API server runs here: the
    token authorizer function, then the ingest function (both the package's handlers, loaded as
    Lambda loads them), without an HTTP server around them."""

    def __init__(self, gateway: Any) -> None:
        self._gateway = gateway

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        raw_body: bytes | None = None,
        source_ip: str = "203.0.113.9",
    ) -> Reply:
        from tidings.local.lambda_env import HttpRequest

        sent = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = raw_body if raw_body is not None else b"" if body is None else json.dumps(body)
        response = self._gateway.answer(
            HttpRequest(
                method=method,
                target=path,
                headers=tuple(sent.items()),
                body=data.encode() if isinstance(data, str) else data,
                source_ip=source_ip,
            )
        )
        raw = response.body.decode()
        return Reply(response.status, json.loads(raw) if raw else None, raw)

    def raw(self, method: str, path: str, body: Any = None, *, token: str) -> Any:
        """The raw answer (status, headers, body) to a JSON request with a token."""
        from tidings.local.lambda_env import HttpRequest

        return self._gateway.answer(
            HttpRequest(
                method=method,
                target=path,
                headers=(
                    ("Content-Type", "application/json"),
                    ("Authorization", f"Bearer {token}"),
                ),
                body=b"" if body is None else json.dumps(body).encode(),
                source_ip="203.0.113.9",
            )
        )

    def page(self, method: str, path: str) -> Any:
        """The raw answer (status, headers, body) to a request without a token."""
        from tidings.local.lambda_env import HttpRequest

        return self._gateway.answer(
            HttpRequest(method=method, target=path, headers=(), body=b"", source_ip="203.0.113.9")
        )


@pytest.fixture
def gateway(database_url: str, settings: Settings) -> Iterator[Gateway]:
    from tidings.local.api_server import Gateway as LocalGateway
    from tidings.local.lambda_env import load_handler

    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        yield Gateway(
            LocalGateway(
                load_handler("ingest"), load_handler("authorizer"), portal=load_handler("portal")
            )
        )
