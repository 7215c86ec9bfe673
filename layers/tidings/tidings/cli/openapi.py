"""``tidings openapi``: write the API's OpenAPI document (committed as ``openapi.json``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tidings.cli import CommandError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("openapi", help="write the ingest API's OpenAPI document")
    parser.add_argument(
        "-o",
        "--output",
        default="-",
        metavar="FILE",
        help="file to write (default: standard output)",
    )
    parser.set_defaults(handler=run)


def document() -> str:
    """The OpenAPI document as stable, indented JSON text ending in a newline."""
    from tidings.api.app import openapi_json

    return json.dumps(json.loads(openapi_json()), indent=2, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    text = document()
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {args.output}: {exc.strerror}") from exc
    return 0
