"""The portal page's elements as its script uses them: every element the script looks up by id
is in the page, once; and every message status the API has is offered and labelled."""

from __future__ import annotations

import collections
import re
from pathlib import Path

from tidings.logic.messages import STATUSES

STATIC = (
    Path(__file__).resolve().parents[3] / "layers" / "tidings" / "tidings" / "portal" / "static"
)
HTML = (STATIC / "index.html").read_text(encoding="utf-8")
SCRIPT = (STATIC / "portal.js").read_text(encoding="utf-8")
# The forms whose fields the script finds as prefix + "-field".
FORM_PREFIXES = ("new-endpoint", "edit-endpoint")


def page_ids() -> collections.Counter[str]:
    return collections.Counter(re.findall(r"\sid=\"([^\"]+)\"", HTML))


def test_every_id_is_in_the_page_once() -> None:
    assert [name for name, count in page_ids().items() if count > 1] == []


def test_every_element_the_script_names_is_in_the_page() -> None:
    ids = page_ids()
    named = set(re.findall(r"\$\(\"([A-Za-z0-9_-]+)\"\)", SCRIPT))
    assert named, "the script names no element"
    assert sorted(named - set(ids)) == []
    suffixes = set(re.findall(r"\$\(prefix \+ \"(-[A-Za-z0-9_-]+)\"\)", SCRIPT))
    assert "-fifo-batch-size" in suffixes and "-ordering" in suffixes
    missing = [prefix + suffix for prefix in FORM_PREFIXES for suffix in suffixes]
    assert sorted(name for name in missing if name not in ids) == []


def test_both_endpoint_forms_offer_the_ordering_options() -> None:
    for prefix in FORM_PREFIXES:
        for field, values in (
            ("ordering", ["none", "fifo"]),
            ("fifo-on-dead-letter", ["continue", "pause"]),
        ):
            select = re.search(rf"<select id=\"{prefix}-{field}\".*?</select>", HTML, re.S)
            assert select is not None, f"{prefix}-{field}"
            assert re.findall(r"<option value=\"([^\"]*)\"", select.group(0)) == values
        batch = re.search(rf"<input id=\"{prefix}-fifo-batch-size\"[^>]*>", HTML)
        assert batch is not None, prefix
        assert 'type="number"' in batch.group(0)
        assert 'min="1"' in batch.group(0) and 'max="100"' in batch.group(0)


def test_every_message_status_is_offered_and_labelled() -> None:
    select = re.search(r"<select id=\"filter-status\".*?</select>", HTML, re.S)
    assert select is not None
    offered = re.findall(r"<option value=\"([^\"]+)\"", select.group(0))
    assert sorted(offered) == sorted(STATUSES)
    for table in ("STATUS_LABELS", "STATUS_BADGES"):
        body = re.search(rf"var {table} = \{{(.*?)\}};", SCRIPT, re.S)
        assert body is not None, table
        assert sorted(re.findall(r"^\s*([a-z_]+):", body.group(1), re.M)) == sorted(STATUSES)
