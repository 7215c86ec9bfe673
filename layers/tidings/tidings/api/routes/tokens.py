"""``/v1/tokens``: the API's bearer tokens."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import CreatedToken, CreateToken, Token, TokenPage
from tidings.api.routes.common import Cursor, Limit, TokenIdPath, errors, json_response, ok, router
from tidings.api.scoping import Link, principal, route
from tidings.logic import access, tokens
from tidings.logic.access import Action


@route(
    router,
    "POST",
    "/v1/tokens",
    summary="Create an API token; the token is in this answer only",
    responses={**ok(201, CreatedToken, "Created"), **errors(403, 404, body=True)},
    links={
        201: {
            "GetToken": Link(
                "get_token", {"token_id": "$response.body#/id"}, "It", in_application=False
            ),
            "RevokeToken": Link(
                "revoke_token",
                {"token_id": "$response.body#/id"},
                "Revoke it",
                in_application=False,
            ),
        }
    },
    tags=["tokens"],
)
def create_token(body: Annotated[CreateToken, Body()]) -> Response[CreatedToken]:
    access.require(principal(router), Action.MANAGE_TOKENS)
    created = tokens.create_token(
        wiring.database(),
        scope=body.scope,
        application=body.application,
        description=body.description,
        expires_at=body.expires_at,
    )
    return json_response(201, created, secret=True)


@route(
    router,
    "GET",
    "/v1/tokens",
    summary="Tokens by ascending id, revoked and expired ones included (never the tokens)",
    responses={**ok(200, TokenPage, "A page of tokens"), **errors(403)},
    links={
        200: {
            "GetFirstToken": Link(
                "get_token",
                {"token_id": "$response.body#/items/0/id"},
                "The first listed",
                in_application=False,
            )
        }
    },
    tags=["tokens"],
)
def list_tokens(cursor: Cursor = None, limit: Limit = 50) -> TokenPage:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.list_tokens(wiring.database(), cursor=cursor, limit=limit)


@route(
    router,
    "GET",
    "/v1/tokens/<token_id>",
    summary="One token (never the token itself)",
    responses={**ok(200, Token, "The token"), **errors(403, 404)},
    tags=["tokens"],
)
def get_token(token_id: TokenIdPath) -> Token:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.get_token(wiring.database(), token_id)


@route(
    router,
    "DELETE",
    "/v1/tokens/<token_id>",
    summary="Revoke a token: refused from now on (on AWS within the authorizer's 60 s cache)",
    responses={**ok(200, Token, "The revoked token"), **errors(403, 404)},
    tags=["tokens"],
)
def revoke_token(token_id: TokenIdPath) -> Token:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.revoke_token(wiring.database(), token_id)
