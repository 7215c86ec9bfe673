"""The committed openapi.json is exactly what the code generates."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tidings.api.app import reads_body
from tidings.cli import main
from tidings.cli.openapi import document

COMMITTED = Path(__file__).resolve().parents[3] / "openapi.json"


def test_committed_document_matches_the_code() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == document(), (
        "openapi.json is stale: run `tidings openapi -o openapi.json`"
    )


# What an application holds, served for the default application at /v1/... and for any
# application at /v1/apps/{app}/...
IN_AN_APPLICATION = {
    ("/events", "post"),
    ("/events/batch", "post"),
    ("/messages", "get"),
    ("/messages/{message_id}", "get"),
    ("/messages/{message_id}/resend", "post"),
    ("/endpoints", "post"),
    ("/endpoints", "get"),
    ("/endpoints/{endpoint_id}", "get"),
    ("/endpoints/{endpoint_id}", "patch"),
    ("/endpoints/{endpoint_id}", "delete"),
    ("/endpoints/{endpoint_id}/rotate-secret", "post"),
    ("/endpoints/{endpoint_id}/secret", "get"),
    ("/endpoints/{endpoint_id}/health", "get"),
    ("/endpoints/{endpoint_id}/recover", "post"),
    ("/dead-letters/replay", "post"),
    ("/portal-links", "post"),
}
MANAGEMENT = {
    ("/v1/apps", "post"),
    ("/v1/apps", "get"),
    ("/v1/apps/{app}", "get"),
    ("/v1/apps/{app}", "patch"),
    ("/v1/apps/{app}", "delete"),
    ("/v1/tokens", "post"),
    ("/v1/tokens", "get"),
    ("/v1/tokens/{token_id}", "get"),
    ("/v1/tokens/{token_id}", "delete"),
    ("/v1/portal/sessions", "post"),
}


def test_document_covers_every_route() -> None:
    paths = json.loads(document())["paths"]
    expected = (
        {(f"/v1{path}", method) for path, method in IN_AN_APPLICATION}
        | {(f"/v1/apps/{{app}}{path}", method) for path, method in IN_AN_APPLICATION}
        | MANAGEMENT
    )
    assert {(path, method) for path, ops in paths.items() for method in ops} == expected
    created = paths["/v1/events"]["post"]["responses"]
    assert {"200", "202", "400", "401", "413", "415", "422"} <= set(created)
    assert {"202", "404", "409"} <= set(
        paths["/v1/messages/{message_id}/resend"]["post"]["responses"]
    )
    endpoint = paths["/v1/endpoints/{endpoint_id}"]["get"]["responses"]["200"]
    assert endpoint["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Endpoint"
    }
    shown = json.loads(document())["components"]["schemas"]["Endpoint"]["properties"]
    assert {"retry_schedule", "retry_schedule_source"} <= set(shown)


def test_every_operation_asks_for_a_bearer_token_and_documents_401() -> None:
    doc = json.loads(document())
    assert doc["security"] == [{"bearerToken": []}]
    assert doc["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert "401" in op["responses"], (method, path)
            if path.startswith("/v1/apps/{app}"):
                assert "404" in op["responses"], (method, path)
                app_param = next(p for p in op["parameters"] if p["name"] == "app")
                assert app_param["in"] == "path" and app_param["required"] is True


def test_scope_refusals_are_documented_where_a_scope_can_meet_them() -> None:
    # Every scope may send events and read messages; everything else (resending a message
    # included) is refused to some scope.
    paths = json.loads(document())["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            every_scope = path.endswith(("/events", "/events/batch")) or (
                "/messages" in path and not path.endswith("/resend")
            )
            assert ("403" in op["responses"]) != every_scope, (method, path)


def test_cli_writes_the_document(tmp_path: Path) -> None:
    target = tmp_path / "api.json"
    assert main(["openapi", "-o", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == document()
    # A file that cannot be written is a failure at run time: exit 1.
    assert main(["openapi", "-o", str(tmp_path / "missing" / "x.json")]) == 1


def test_a_content_type_is_required_exactly_where_the_document_takes_a_body() -> None:
    """The API refuses a body-taking route's request without application/json (415); which
    routes take one is read from the code, and must be what the document says."""
    paths = json.loads(COMMITTED.read_text(encoding="utf-8"))["paths"]
    seen = 0
    for template, operations in paths.items():
        path = re.sub(r"\{[^}]+\}", "7", template)
        for method, operation in operations.items():
            assert reads_body(method.upper(), path) == ("requestBody" in operation), (
                method,
                template,
            )
            seen += "requestBody" in operation
    assert seen > 10
