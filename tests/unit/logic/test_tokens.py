"""Tokens' pure parts: their shape, hash and prefix, when a stored token may be used, and the
bearer header the authorizer reads."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from tidings.api.authorizer import bearer_token
from tidings.logic import tokens

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_a_token_is_tdg_and_32_random_bytes() -> None:
    made = {tokens.generate() for _ in range(200)}
    assert len(made) == 200
    for token in made:
        assert tokens.is_token(token)
        assert len(token) == 4 + 43
        assert tokens.prefix_of(token) == token[:12]
        assert tokens.digest(token) == hashlib.sha256(token.encode()).digest()


@given(st.text(max_size=60))
def test_anything_else_is_not_a_token(text: str) -> None:
    if not (text.startswith("tdg_") and len(text) == 47):
        assert not tokens.is_token(text)


def test_near_misses_are_not_tokens() -> None:
    token = tokens.generate()
    for near in (token[:-1], token + "A", "tdx_" + token[4:], token[:10] + "+" + token[11:], ""):
        assert not tokens.is_token(near)
    assert not tokens.is_token(None)


def row(**changes: object) -> dict[str, object]:
    values: dict[str, object] = {
        "revoked_at": None,
        "expires_at": None,
        "app_id": None,
        "app_deleted": None,
    }
    values.update(changes)
    return values


def test_token_state() -> None:
    assert tokens.token_state(row(), NOW) == "valid"
    assert tokens.token_state(row(expires_at=NOW + timedelta(seconds=1)), NOW) == "valid"
    assert tokens.token_state(row(expires_at=NOW), NOW) == "expired"
    assert tokens.token_state(row(revoked_at=NOW - timedelta(days=1)), NOW) == "revoked"
    assert tokens.token_state(row(app_id=4, app_deleted=False), NOW) == "valid"
    assert tokens.token_state(row(app_id=4, app_deleted=True), NOW) == "application_deleted"


@given(
    st.one_of(st.none(), st.integers(-(10**6), 10**6)),
    st.one_of(st.none(), st.integers(-(10**6), 10**6)),
    st.booleans(),
)
def test_a_token_is_valid_only_unrevoked_unexpired_and_in_a_live_application(
    expires_in: int | None, revoked_ago: int | None, app_deleted: bool
) -> None:
    state = tokens.token_state(
        row(
            expires_at=None if expires_in is None else NOW + timedelta(seconds=expires_in),
            revoked_at=None if revoked_ago is None else NOW - timedelta(seconds=revoked_ago),
            app_id=9,
            app_deleted=app_deleted,
        ),
        NOW,
    )
    valid = revoked_ago is None and (expires_in is None or expires_in > 0) and not app_deleted
    assert (state == "valid") is valid


def test_the_bearer_header() -> None:
    token = tokens.generate()
    assert bearer_token(f"Bearer {token}") == token
    assert bearer_token(f"bearer {token}") == token
    assert bearer_token(f"Bearer  {token} ") == token
    for header in (None, "", token, f"Basic {token}", f"Bearer {token} extra", "Bearer "):
        assert bearer_token(header) is None
