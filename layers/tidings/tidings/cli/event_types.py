"""``tidings event-types list|show|create|update|archive|import|export|send-example``: the
deployment's event-type catalog, on the database or over the API (changing it takes an admin
token there).

``import`` reads an OpenAPI 3.1 document's ``webhooks`` (one event type per operation, named by
its ``x-tidings-event-type`` or else its webhook key; ``tidings.logic.catalog_documents``) and
applies it in one transaction; ``export`` writes the catalog as such a document, which imports
back to the same catalog. JSON values (a schema, an example) are given inline or as ``@FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tidings.cli import UsageError
from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import add_app_option, plain, print_json, when, write_output
from tidings.local.progress import table

EXPORT_TITLE = "Tidings event types"


def json_value(text: str) -> Any:
    """A JSON value given inline, or read from the file after ``@``."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def version_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"version {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"version {text!r} must be positive")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(parser, after_command=True)


def _fields(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    parser.add_argument("--description", default=None, help="what the event means, for people")
    schema = parser.add_mutually_exclusive_group()
    schema.add_argument(
        "--schema",
        type=json_value,
        default=None,
        metavar="JSON|@FILE",
        help="the payloads' JSON Schema (draft 2020-12)",
    )
    examples = parser.add_mutually_exclusive_group()
    examples.add_argument(
        "--example",
        type=json_value,
        action="append",
        default=None,
        metavar="JSON|@FILE",
        help="an example payload (repeat for more; the first is what send-example sends)"
        + ("" if creating else "; replaces every example"),
    )
    if not creating:
        schema.add_argument("--no-schema", action="store_true", help="remove the schema")
        examples.add_argument("--no-examples", action="store_true", help="remove the examples")
    flag = argparse.BooleanOptionalAction
    parser.add_argument("--deprecated", action=flag, default=None, help="mark it deprecated")
    parser.add_argument(
        "--validate-payloads",
        action=flag,
        default=None,
        help="refuse (API: 422) events of the type whose payload does not match the schema",
    )
    if not creating:
        parser.add_argument(
            "--archived", action=flag, default=None, help="archive it (hidden from the portal)"
        )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "event-types", help="the event-type catalog: schemas and examples of each type"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="list the catalog")
    listing.add_argument("--all", action="store_true", help="archived types too")
    _common(listing)
    listing.set_defaults(handler=run_list)

    show = actions.add_parser("show", help="one type with its schema and examples")
    show.add_argument("name", metavar="NAME", help="the event type")
    show.add_argument(
        "--version", type=version_number, default=None, help="an earlier version of its schema"
    )
    _common(show)
    show.set_defaults(handler=run_show)

    create = actions.add_parser("create", help="add a type to the catalog")
    create.add_argument("name", metavar="NAME", help="the event type, such as invoice.paid")
    _fields(create, creating=True)
    _common(create)
    create.set_defaults(handler=run_create)

    update = actions.add_parser(
        "update", help="change a type (a new schema or new examples make a new version)"
    )
    update.add_argument("name", metavar="NAME", help="the event type")
    _fields(update, creating=False)
    _common(update)
    update.set_defaults(handler=run_update)

    archive = actions.add_parser(
        "archive", help="hide a type from the portal (its events are still delivered)"
    )
    archive.add_argument("name", metavar="NAME", help="the event type")
    _common(archive)
    archive.set_defaults(handler=run_archive)

    importing = actions.add_parser(
        "import", help="add or change the types of an OpenAPI 3.1 document's webhooks"
    )
    importing.add_argument("document", metavar="FILE", help="the document (JSON), - for stdin")
    _common(importing)
    importing.set_defaults(handler=run_import)

    export = actions.add_parser("export", help="write the catalog as an OpenAPI 3.1 document")
    export.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="file to write (default: stdout)"
    )
    add_remote_options(export, after_command=True)
    export.set_defaults(handler=run_export)

    example = actions.add_parser(
        "send-example", help="send a type's first example to an endpoint, as a real message"
    )
    example.add_argument("name", metavar="NAME", help="the event type, which has an example")
    example.add_argument(
        "--endpoint", type=int, required=True, metavar="ID", help="the endpoint to send it to"
    )
    add_app_option(example)
    _common(example)
    example.set_defaults(handler=run_send_example)


def run_list(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.event_types(include_archived=args.all)
    if args.json:
        print_json(found)
        return 0
    rows: list[list[object]] = [
        [t.name, t.version, _flags(t), "yes" if t.schema is not None else "-", t.description]
        for t in found
    ]
    print(table(("name", "version", "state", "schema", "description"), rows))
    return 0


def run_show(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        if args.version is None:
            found: Any = backend.event_type(args.name)
        else:
            found = backend.event_type_version(args.name, args.version)
    if args.json:
        print_json(found)
        return 0
    print(f"{found.name} (version {found.version})")
    if args.version is None:
        print(f"  state:       {_flags(found)}")
        print(f"  description: {found.description or '-'}")
        print(f"  updated:     {when(found.updated_at)}")
    print("  schema:")
    print(_indented("none" if found.schema is None else json.dumps(found.schema, indent=2)))
    for index, value in enumerate(found.examples, 1):
        print(f"  example {index}:")
        print(_indented(json.dumps(value, indent=2)))
    return 0


def run_create(args: argparse.Namespace) -> int:
    fields = {
        "description": args.description,
        "schema": args.schema,
        "examples": args.example,
        "deprecated": args.deprecated,
        "validate_payloads": args.validate_payloads,
    }
    with backend_for(args) as backend:
        created = backend.create_event_type(
            args.name, {k: v for k, v in fields.items() if v is not None}
        )
    return _print_changed(args, created, "created")


def run_update(args: argparse.Namespace) -> int:
    changes: dict[str, Any] = {}
    if args.no_schema:
        changes["schema"] = None
    elif args.schema is not None:
        changes["schema"] = args.schema
    if args.no_examples:
        changes["examples"] = []
    elif args.example is not None:
        changes["examples"] = args.example
    for name in ("description", "deprecated", "validate_payloads", "archived"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if not changes:
        raise UsageError(
            "nothing to change: give --description, --schema, --example, --deprecated, "
            "--validate-payloads or --archived (or their --no- forms)"
        )
    with backend_for(args) as backend:
        changed = backend.update_event_type(args.name, changes)
    return _print_changed(args, changed, "changed")


def run_archive(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        changed = backend.update_event_type(args.name, {"archived": True})
    return _print_changed(args, changed, "archived")


def run_import(args: argparse.Namespace) -> int:
    document = _read_document(args.document)
    with backend_for(args) as backend:
        result = backend.import_event_types(document)
    if args.json:
        print_json(result)
        return 0
    for verb, names in (
        ("created", result.created),
        ("updated", result.updated),
        ("unchanged", result.unchanged),
    ):
        print(f"{verb}: {', '.join(names) if names else '-'}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from tidings import __version__
    from tidings.logic.catalog_documents import write_document

    with backend_for(args) as backend:
        found = backend.event_types(include_archived=True)
    document = write_document((plain(t) for t in found), title=EXPORT_TITLE, version=__version__)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    write_output(args.output, text)
    return 0


def run_send_example(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        sent = backend.send_example(args.app, args.endpoint, args.name)
    if args.json:
        print_json(sent)
        return 0
    (message_id,) = sent.message_ids
    print(f"example of {sent.event_type} sent to endpoint {args.endpoint}: message {message_id}")
    return 0


def _read_document(source: str) -> Any:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"{source} is not a JSON document: {exc}") from None


def _print_changed(args: argparse.Namespace, entry: Any, verb: str) -> int:
    if args.json:
        print_json(entry)
    else:
        print(f"event type {entry.name} {verb} (version {entry.version}, {_flags(entry)})")
    return 0


def _flags(entry: Any) -> str:
    found = [
        name
        for name, on in (
            ("archived", entry.archived),
            ("deprecated", entry.deprecated),
            ("validated", entry.validate_payloads),
        )
        if on
    ]
    return ", ".join(found) or "active"


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
