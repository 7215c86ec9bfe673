"""``tidings event-types`` in both modes: the catalog kept from the command line, an OpenAPI 3.1
document imported and exported (a round trip changes nothing), and an example sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.cli.test_both_modes_cli import Cli, cli, mode  # noqa: F401 - the fixtures
from tidings.dal.connection import Database

ORDER_SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {"id": {"type": "string"}, "customer": {"$ref": "#/components/schemas/Who"}},
}
# A document as an API's authors write one: a webhook per event, a shared component, a named
# type beside one named after its key, examples in both spellings.
DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Shop webhooks", "version": "1"},
    "webhooks": {
        "order.paid": {
            "post": {
                "summary": "An order was paid",
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": ORDER_SCHEMA,
                            "examples": {
                                "small": {"value": {"id": "o1", "customer": {"name": "Ann"}}},
                                "bare": {"value": {"id": "o2"}},
                            },
                        }
                    }
                },
            }
        },
        "refunds": {
            "post": {
                "x-tidings-event-type": "order.refunded",
                "description": "An order was refunded",
                "deprecated": True,
                "x-tidings-validate-payloads": True,
                "requestBody": {"$ref": "#/components/requestBodies/Refund"},
            }
        },
    },
    "components": {
        "schemas": {
            "Who": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        "requestBodies": {
            "Refund": {
                "content": {
                    "application/json": {
                        "schema": {"type": "object", "required": ["amount"]},
                        "example": {"amount": 3},
                    }
                }
            }
        },
    },
}


def _json(out: str) -> Any:
    return json.loads(out)


def test_types_are_created_shown_changed_and_archived(cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["id"]}))
    code, out, err = cli(
        "event-types",
        "create",
        "invoice.paid",
        "--description",
        "An invoice was paid",
        "--schema",
        f"@{schema}",
        "--example",
        '{"id": "in_1"}',
        "--validate-payloads",
    )
    assert code == 0, err
    assert out.strip() == "event type invoice.paid created (version 1, validated)"
    code, out, _ = cli("event-types", "show", "invoice.paid")
    assert code == 0
    assert '"required": [' in out and '"id": "in_1"' in out
    code, out, _ = cli(
        "event-types", "update", "invoice.paid", "--schema", '{"type": "object"}', "--json"
    )
    assert code == 0 and _json(out)["version"] == 2
    code, out, _ = cli("event-types", "show", "invoice.paid", "--version", "1", "--json")
    assert _json(out)["schema"] == {"type": "object", "required": ["id"]}
    code, out, _ = cli("event-types", "archive", "invoice.paid")
    assert code == 0 and "archived" in out
    code, out, _ = cli("event-types", "list", "--json")
    assert _json(out) == []
    code, out, _ = cli("event-types", "list", "--all", "--json")
    assert [t["name"] for t in _json(out)] == ["invoice.paid"]


def test_refusals_name_the_problem_and_exit_2(cli: Cli) -> None:  # noqa: F811
    code, _, err = cli("event-types", "create", "bad.schema", "--schema", '{"type": 12}')
    assert code == 2 and "not a valid JSON Schema" in err
    code, _, err = cli(
        "event-types",
        "create",
        "bad.example",
        "--schema",
        '{"type": "object"}',
        "--example",
        "[1]",
    )
    assert code == 2 and "examples[0]" in err
    code, _, err = cli("event-types", "create", "x", "--schema", "{not json")
    assert code == 2 and "not valid JSON" in err
    code, _, err = cli("event-types", "update", "missing.type", "--deprecated")
    assert code == 1 and "does not exist" in err
    code, _, err = cli("event-types", "update", "missing.type")
    assert code == 2 and "nothing to change" in err
    code, out, _ = cli("event-types", "list", "--all", "--json")
    assert _json(out) == []


def test_an_openapi_document_imports_and_a_round_trip_changes_nothing(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    db: Database,
) -> None:
    source = tmp_path / "openapi.json"
    source.write_text(json.dumps(DOCUMENT))
    code, out, err = cli("event-types", "import", str(source), "--json")
    assert code == 0, err
    assert _json(out) == {
        "created": ["order.paid", "order.refunded"],
        "updated": [],
        "unchanged": [],
    }
    code, out, _ = cli("event-types", "show", "order.paid", "--json")
    paid = _json(out)
    assert paid["description"] == "An order was paid"
    # The component it refers to came along, in its $defs.
    assert paid["schema"]["properties"]["customer"] == {"$ref": "#/$defs/Who"}
    assert paid["schema"]["$defs"]["Who"] == DOCUMENT["components"]["schemas"]["Who"]
    assert paid["examples"] == [{"id": "o1", "customer": {"name": "Ann"}}, {"id": "o2"}]
    code, out, _ = cli("event-types", "show", "order.refunded", "--json")
    refunded = _json(out)
    assert (refunded["deprecated"], refunded["validate_payloads"]) == (True, True)
    assert refunded["examples"] == [{"amount": 3}]

    exported = tmp_path / "exported.json"
    assert cli("event-types", "export", "-o", str(exported))[0] == 0
    before = _catalog(db)
    code, out, _ = cli("event-types", "import", str(exported), "--json")
    assert _json(out) == {
        "created": [],
        "updated": [],
        "unchanged": ["order.paid", "order.refunded"],
    }
    assert _catalog(db) == before
    again = tmp_path / "again.json"
    assert cli("event-types", "export", "-o", str(again))[0] == 0
    assert again.read_text() == exported.read_text()


def test_an_import_changes_what_differs_and_refuses_all_or_nothing(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    db: Database,
) -> None:
    source = tmp_path / "openapi.json"
    source.write_text(json.dumps(DOCUMENT))
    assert cli("event-types", "import", str(source))[0] == 0
    before = _catalog(db)
    changed = json.loads(json.dumps(DOCUMENT))
    changed["webhooks"]["order.paid"]["post"]["summary"] = "Paid at last"
    bad = {"post": {"requestBody": {"content": {"application/json": {"schema": {"type": 1}}}}}}
    changed["webhooks"]["broken"] = bad
    source.write_text(json.dumps(changed))
    code, _, err = cli("event-types", "import", str(source))
    assert code == 2 and "broken" in err
    # The type that was fine is not changed either.
    assert _catalog(db) == before
    del changed["webhooks"]["broken"]
    changed["webhooks"]["order paid"] = {"post": {}}
    source.write_text(json.dumps(changed))
    code, _, err = cli("event-types", "import", str(source))
    assert code == 2 and "'order paid' cannot be catalogued" in err
    assert _catalog(db) == before
    del changed["webhooks"]["order paid"]
    source.write_text(json.dumps(changed))
    code, out, _ = cli("event-types", "import", str(source), "--json")
    assert _json(out)["updated"] == ["order.paid"]
    code, out, _ = cli("event-types", "show", "order.paid", "--json")
    assert (_json(out)["description"], _json(out)["version"]) == ("Paid at last", 1)


def test_send_example_from_the_command_line(cli: Cli) -> None:  # noqa: F811
    code, out, _ = cli(
        "endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "other", "--json"
    )
    endpoint = str(_json(out)["id"])
    assert cli("event-types", "create", "order.paid", "--example", '{"id": 1}')[0] == 0
    code, out, err = cli("event-types", "send-example", "order.paid", "--endpoint", endpoint)
    assert code == 0, err
    message = out.strip().rsplit(" ", 1)[1]
    code, out, _ = cli("messages", "show", message, "--json")
    shown = _json(out)
    assert (shown["example"], shown["payload"]) == (True, {"id": 1})
    code, out, _ = cli("messages", "show", message)
    assert "order.paid example-" in out and "(an example from the event catalog)" in out


def _catalog(db: Database) -> list[Any]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT t.name, t.description, t.deprecated, t.archived, t.validate_payloads,"
            " t.version, t.updated_at, v.version, v.schema, v.examples, v.created_at"
            " FROM tidings.event_types t"
            " JOIN tidings.event_type_versions v ON v.event_type_id = t.id"
            " ORDER BY t.name, v.version"
        )
        return cur.fetchall()
