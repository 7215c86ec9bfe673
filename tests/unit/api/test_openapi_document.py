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
    ("/endpoints/{endpoint_id}/send-example", "post"),
    ("/endpoints/{endpoint_id}/lines", "get"),
    ("/endpoints/{endpoint_id}/lines/resume", "post"),
    ("/dead-letters/replay", "post"),
    ("/portal-links", "post"),
}
MANAGEMENT = {
    ("/v1/filters/test", "post"),
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
    # The operators' views: every application's, and one application's.
    ("/v1/admin/status", "get"),
    ("/v1/admin/dead-letters", "get"),
    ("/v1/apps/{app}/status", "get"),
    ("/v1/apps/{app}/dead-letters", "get"),
    # The deployment's event-type catalog.
    ("/v1/event-types", "post"),
    ("/v1/event-types", "get"),
    ("/v1/event-types/import", "post"),
    ("/v1/event-types/{name}", "get"),
    ("/v1/event-types/{name}", "patch"),
    ("/v1/event-types/{name}/versions/{version}", "get"),
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


def test_every_operation_is_named_after_its_route() -> None:
    doc = json.loads(document())
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for path, ops in doc["paths"].items():
        for op in ops.values():
            # An application's route keeps one name, told apart by where it is served.
            in_app = path.startswith("/v1/apps/{app}/") and any(
                path == f"/v1/apps/{{app}}{inner}" for inner, _ in IN_AN_APPLICATION
            )
            assert op["operationId"].endswith("_in_app") == in_app, path


def test_every_link_leads_to_an_operation_with_the_parameters_it_gives() -> None:
    """A link names an operation of the document and only parameters that operation takes, each
    from the response it is on or from the request's own path."""
    doc = json.loads(document())
    operations = {
        op["operationId"]: (path, op) for path, ops in doc["paths"].items() for op in ops.values()
    }
    followed = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            own = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            for status, answer in op["responses"].items():
                for name, link in answer.get("links", {}).items():
                    assert status.startswith("2"), (method, path, name)
                    target_path, target = operations[link["operationId"]]
                    taken = {p["name"]: p["in"] for p in target.get("parameters", [])}
                    # Every path parameter of the target is given.
                    wanted = {n for n, where in taken.items() if where == "path"}
                    assert wanted <= set(link["parameters"]), (path, name, target_path)
                    for parameter, expression in link["parameters"].items():
                        assert parameter in taken, (path, name, parameter)
                        if expression.startswith("$request.path."):
                            assert expression.removeprefix("$request.path.") in own
                        else:
                            assert expression.startswith("$response.body#/"), expression
                    followed += 1
    # Each created thing leads to what can be done with it (counted when this was written).
    assert followed >= 60


def test_what_is_created_links_to_what_can_be_done_with_it() -> None:
    paths = json.loads(document())["paths"]

    def targets(path: str, method: str, status: str) -> set[str]:
        links = paths[path][method]["responses"][status]["links"]
        return {link["operationId"] for link in links.values()}

    assert {
        "get_endpoint",
        "update_endpoint",
        "delete_endpoint",
        "rotate_secret",
        "endpoint_health",
        "recover_endpoint",
    } <= targets("/v1/endpoints", "post", "201")
    assert "get_endpoint_in_app" in targets("/v1/apps/{app}/endpoints", "post", "201")
    assert {"get_application", "delete_application", "create_endpoint_in_app"} <= targets(
        "/v1/apps", "post", "201"
    )
    assert {"get_message", "resend_message"} <= targets("/v1/events", "post", "202")
    assert {"get_message", "resend_message"} <= targets("/v1/events", "post", "200")
    assert {"get_token", "revoke_token"} <= targets("/v1/tokens", "post", "201")
    created = paths["/v1/apps/{app}/endpoints"]["post"]["responses"]["201"]["links"]
    assert created["GetEndpoint"]["parameters"] == {
        "app": "$request.path.app",
        "endpoint_id": "$response.body#/id",
    }


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
