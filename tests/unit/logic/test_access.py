"""The scopes of API tokens as pure rules: what each may do, which applications it may see,
and the authorizer context that carries a principal from the authorizer to the ingest function."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.logic.access import Action, Principal, Scope, permits, require, sees
from tidings.logic.errors import Forbidden

ENDPOINT_WORK = {
    Action.READ_ENDPOINTS,
    Action.MANAGE_ENDPOINTS,
    Action.REVEAL_SECRETS,
    Action.REPLAY,
    Action.MAKE_PORTAL_LINKS,
}
ADMIN_ONLY = {
    Action.MANAGE_APPLICATIONS,
    Action.MANAGE_TOKENS,
    Action.READ_EVERY_APPLICATION,
    # The event-type catalog is the deployment's, shared by every application.
    Action.MANAGE_EVENT_TYPES,
}
# What only a portal link does: open its session.
LINK_ONLY = {Action.OPEN_PORTAL_SESSION}
CHANGES = {
    Action.SEND_EVENTS,
    Action.MANAGE_ENDPOINTS,
    Action.REVEAL_SECRETS,
    Action.REPLAY,
    Action.MAKE_PORTAL_LINKS,
    Action.SEND_EXAMPLES,
    Action.MANAGE_EVENT_TYPES,
}

ids = st.integers(1, 2**63 - 1)
principals = st.one_of(
    st.builds(Principal, st.just(Scope.ADMIN), st.none(), st.one_of(st.none(), ids)),
    st.builds(Principal, st.just(Scope.PRODUCER), st.none(), st.one_of(st.none(), ids)),
    st.builds(
        Principal,
        st.sampled_from([Scope.APP, Scope.APP_READ, Scope.PORTAL_LINK]),
        ids,
        st.one_of(st.none(), ids),
    ),
    st.builds(
        Principal,
        st.sampled_from([Scope.APP, Scope.APP_READ]),
        ids,
        ids,
        st.just(True),
    ),
)


def test_admin_may_do_everything_but_open_a_portal_session() -> None:
    allowed = {a for a in Action if permits(Principal(Scope.ADMIN), a)}
    assert allowed == set(Action) - LINK_ONLY


def test_producer_sends_and_reads_messages_only() -> None:
    producer = Principal(Scope.PRODUCER)
    allowed = {a for a in Action if permits(producer, a)}
    # Trying a filter reads and changes nothing, nor does reading the catalog: every token but
    # a portal link may.
    assert allowed == {
        Action.SEND_EVENTS,
        Action.READ_MESSAGES,
        Action.TEST_FILTERS,
        Action.READ_EVENT_TYPES,
    }
    for action in ENDPOINT_WORK | ADMIN_ONLY | {Action.READ_APPLICATION, Action.SEND_EXAMPLES}:
        with pytest.raises(Forbidden) as refused:
            require(producer, action)
        assert refused.value.code == "forbidden"


def test_an_application_token_does_everything_inside_its_application_only() -> None:
    app = Principal(Scope.APP, app_id=5)
    assert {a for a in Action if permits(app, a)} == set(Action) - ADMIN_ONLY - LINK_ONLY
    assert sees(app, 5)
    assert not sees(app, 6)
    assert not sees(app, 1)


def test_a_read_only_token_reads_its_application_and_changes_nothing() -> None:
    reader = Principal(Scope.APP_READ, app_id=5)
    allowed = {a for a in Action if permits(reader, a)}
    assert allowed == {
        Action.READ_MESSAGES,
        Action.READ_ENDPOINTS,
        Action.READ_APPLICATION,
        Action.TEST_FILTERS,
        Action.READ_EVENT_TYPES,
    }
    assert not allowed & (CHANGES | ADMIN_ONLY | LINK_ONLY)
    assert sees(reader, 5) and not sees(reader, 6)


@pytest.mark.parametrize("scope", [Scope.APP, Scope.APP_READ])
def test_a_portal_session_neither_sends_events_nor_makes_links(scope: Scope) -> None:
    session = Principal(scope, app_id=5, token_id=9, portal_session=True)
    token = Principal(scope, app_id=5, token_id=9)
    allowed = {a for a in Action if permits(session, a)}
    assert allowed == {a for a in Action if permits(token, a)} - {
        Action.SEND_EVENTS,
        Action.MAKE_PORTAL_LINKS,
    }
    with pytest.raises(Forbidden, match="a portal session of scope"):
        require(session, Action.MAKE_PORTAL_LINKS)
    assert Principal.from_context(session.context()) == session
    with pytest.raises(ValueError):
        Principal(Scope.ADMIN, portal_session=True)


def test_a_portal_link_only_opens_a_session_of_its_application() -> None:
    link = Principal(Scope.PORTAL_LINK, app_id=5)
    assert {a for a in Action if permits(link, a)} == LINK_ONLY
    assert sees(link, 5) and not sees(link, 6)
    with pytest.raises(ValueError):
        Principal(Scope.PORTAL_LINK)
    with pytest.raises(ValueError):
        Principal(Scope.APP_READ)


@given(principals, ids)
def test_only_application_tokens_are_confined(principal: Principal, app_id: int) -> None:
    if principal.scope in (Scope.APP, Scope.APP_READ, Scope.PORTAL_LINK):
        assert sees(principal, app_id) is (app_id == principal.app_id)
    else:
        assert sees(principal, app_id)


@given(principals)
def test_the_authorizer_context_carries_the_principal_exactly(principal: Principal) -> None:
    context = principal.context()
    assert all(isinstance(value, str) for value in context.values())
    assert Principal.from_context(context) == principal
    # API Gateway adds principalId beside the context's keys.
    assert Principal.from_context({"principalId": "token-1", **context}) == principal


@pytest.mark.parametrize(
    "context",
    [
        None,
        {},
        {"scope": "root"},
        {"scope": "app"},
        {"scope": "admin", "app_id": "3"},
        {"scope": "app", "app_id": "-3"},
        {"scope": "app", "app_id": "3x"},
        {"scope": "app", "app_id": "1" * 20},
        {"scope": "producer", "token_id": "٣"},
    ],
)
def test_a_context_that_names_no_valid_principal_names_none(context: dict | None) -> None:
    assert Principal.from_context(context) is None


def test_an_application_is_named_by_application_tokens_and_only_them() -> None:
    with pytest.raises(ValueError):
        Principal(Scope.APP)
    with pytest.raises(ValueError):
        Principal(Scope.PRODUCER, app_id=3)
