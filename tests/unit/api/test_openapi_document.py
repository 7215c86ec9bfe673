"""The committed openapi.json is exactly what the code generates."""

from __future__ import annotations

import json
from pathlib import Path

from tidings.cli import main
from tidings.cli.openapi import document

COMMITTED = Path(__file__).resolve().parents[3] / "openapi.json"


def test_committed_document_matches_the_code() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == document(), (
        "openapi.json is stale: run `tidings openapi -o openapi.json`"
    )


def test_document_covers_every_route() -> None:
    paths = json.loads(document())["paths"]
    expected = {
        ("/v1/events", "post"),
        ("/v1/events/batch", "post"),
        ("/v1/messages", "get"),
        ("/v1/messages/{message_id}", "get"),
        ("/v1/messages/{message_id}/resend", "post"),
        ("/v1/endpoints", "post"),
        ("/v1/endpoints", "get"),
        ("/v1/endpoints/{endpoint_id}", "get"),
        ("/v1/endpoints/{endpoint_id}", "patch"),
        ("/v1/endpoints/{endpoint_id}", "delete"),
        ("/v1/endpoints/{endpoint_id}/rotate-secret", "post"),
        ("/v1/endpoints/{endpoint_id}/health", "get"),
        ("/v1/endpoints/{endpoint_id}/recover", "post"),
        ("/v1/dead-letters/replay", "post"),
    }
    assert {(path, method) for path, ops in paths.items() for method in ops} == expected
    created = paths["/v1/events"]["post"]["responses"]
    assert {"200", "202", "400", "413", "422"} <= set(created)
    assert {"202", "404", "409"} <= set(
        paths["/v1/messages/{message_id}/resend"]["post"]["responses"]
    )
    endpoint = paths["/v1/endpoints/{endpoint_id}"]["get"]["responses"]["200"]
    assert endpoint["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Endpoint"
    }
    shown = json.loads(document())["components"]["schemas"]["Endpoint"]["properties"]
    assert {"retry_schedule", "retry_schedule_source"} <= set(shown)


def test_cli_writes_the_document(tmp_path: Path) -> None:
    target = tmp_path / "api.json"
    assert main(["openapi", "-o", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == document()
    assert main(["openapi", "-o", str(tmp_path / "missing" / "x.json")]) == 2
