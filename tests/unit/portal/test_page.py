"""The portal page's answers: only its three files, each with the security headers, and a
policy whose frame-ancestors comes from checked settings only."""

from __future__ import annotations

import re

import pytest

from tidings.config import ConfigError, Settings
from tidings.portal import answer, content_security_policy


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/portal", "text/html"),
        ("/portal/portal.js", "text/javascript"),
        ("/portal/portal.css", "text/css"),
    ],
)
def test_the_three_files_are_served_with_their_type_and_headers(path: str, kind: str) -> None:
    found = answer(path, ())
    assert found.status == 200 and found.body
    assert found.headers["Content-Type"].startswith(kind)
    assert found.headers["X-Content-Type-Options"] == "nosniff"
    assert found.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in found.headers["Content-Security-Policy"]


def test_the_page_with_a_slash_sends_the_browser_to_the_page_without() -> None:
    found = answer("/portal/", ())
    assert (found.status, found.headers["Location"]) == (308, "../portal")


@pytest.mark.parametrize(
    "path",
    [
        "/portal/../functions/portal/app.py",
        "/portal/static/index.html",
        "/portal/index.html",
        "/portal/portal.js/",
        "/portalx",
        "/v1/portal",
        "/portal/%2e%2e/openapi.json",
    ],
)
def test_nothing_else_is_served(path: str) -> None:
    found = answer(path, ())
    assert found.status == 404
    assert found.body == b"not found\n"


def test_the_page_loads_nothing_inline_and_nothing_from_elsewhere() -> None:
    page = answer("/portal", ()).body.decode()
    policy = content_security_policy(())
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    # Relative references only: the page works under an API stage's path prefix.
    assert 'src="portal/portal.js"' in page and 'href="portal/portal.css"' in page
    assert not re.search(r"""(src|href)=["'](https?:)?//""", page)
    assert "<script>" not in page and "style=" not in page and "onclick" not in page


def test_frame_ancestors_are_origins_checked_by_the_settings() -> None:
    settings = Settings.from_env({"TIDINGS_PORTAL_FRAME_ANCESTORS": "https://a.example.com"})
    policy = content_security_policy(settings.portal_frame_ancestors)
    assert policy.endswith("frame-ancestors https://a.example.com")
    assert "X-Frame-Options" not in answer("/portal", settings.portal_frame_ancestors).headers
    for bad in ("https://a.example.com; script-src *", "javascript:alert(1)", "*", "'self'"):
        with pytest.raises(ConfigError, match="TIDINGS_PORTAL_FRAME_ANCESTORS"):
            Settings.from_env({"TIDINGS_PORTAL_FRAME_ANCESTORS": bad})
