"""The consumer portal's page: three static files from this package, served with the headers
that keep it safe.

The page (``static/index.html``, its script and style sheet) is public: it holds nothing of any
application. Everything it shows it asks the public API for, with the session a portal link
opens (``tidings.logic.portal``). What protects it:
- a Content-Security-Policy that lets it load only its own script and style, talk only to its
  own origin, and run no inline script (a payload or URL that slipped into the page as markup
  could still not run);
- ``frame-ancestors`` naming the origins allowed to embed it (``portal_frame_ancestors``), and
  none by default;
- no cookies: the session lives in the tab's sessionStorage and travels in an Authorization
  header, which no other site's page can make the browser send (no CSRF by construction);
- ``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store`` on the page.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

# The files the page is made of, by the name they are asked for after /portal/.
ASSETS = {
    "": ("index.html", "text/html; charset=utf-8"),
    "portal.js": ("portal.js", "text/javascript; charset=utf-8"),
    "portal.css": ("portal.css", "text/css; charset=utf-8"),
}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def content_security_policy(frame_ancestors: Sequence[str]) -> str:
    """The page's policy; ``frame_ancestors`` are checked origins (``tidings.config``)."""
    ancestors = " ".join(frame_ancestors) if frame_ancestors else "'none'"
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            f"frame-ancestors {ancestors}",
        )
    )


def security_headers(frame_ancestors: Sequence[str]) -> dict[str, str]:
    headers = {
        "Content-Security-Policy": content_security_policy(frame_ancestors),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    }
    if not frame_ancestors:
        # For browsers that predate frame-ancestors.
        headers["X-Frame-Options"] = "DENY"
    return headers


@functools.cache
def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def answer(path: str, frame_ancestors: Sequence[str]) -> Answer:
    """The answer to ``GET <path>`` (``/portal`` or ``/portal/<file>``)."""
    headers = security_headers(frame_ancestors)
    if path == "/portal/":
        # The page's relative references resolve from /portal only.
        headers["Location"] = "../portal"
        return Answer(308, headers, b"")
    rest = path.removeprefix("/portal/") if path.startswith("/portal/") else None
    if path == "/portal":
        rest = ""
    found = ASSETS.get(rest) if rest is not None else None
    if found is None:
        headers["Content-Type"] = "text/plain; charset=utf-8"
        headers["Cache-Control"] = "no-store"
        return Answer(404, headers, b"not found\n")
    name, content_type = found
    headers["Content-Type"] = content_type
    # The page is small and changes with each release: always fetched fresh.
    headers["Cache-Control"] = "no-store" if rest == "" else "no-cache"
    return Answer(200, headers, _read(name))
