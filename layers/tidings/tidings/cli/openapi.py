"""``tidings openapi``: write the API's OpenAPI document (committed as ``openapi.json``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli.support import write_output


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
    write_output(args.output, text)
    return 0
