"""Who is asking, and for which application: the checks every route makes before its use case.

API Gateway's Lambda authorizer (``tidings.api.authorizer``; locally the same code, run by the
local API server) validates the bearer token and hands its scope and application to the ingest
function in the request context. A route then:
1. refuses (403) an action the token's scope does not allow, whatever it is done to;
2. finds the application the path names (``/v1/apps/{app}/…``, its uid or id) or 'default' (the
   routes without ``/apps/{app}``), answering 404 when it does not exist or belongs to another
   application's token, so that existence does not leak;
3. runs its use case inside that application, where another application's endpoint, message or
   attempt is as unknown as one that does not exist (404).

``app_routes`` registers each such route twice, at ``/v1{path}`` and ``/v1/apps/<app>{path}``.

Every route's operation id is its function's name (``_in_app`` added for the variant at
``/v1/apps/<app>…``), so that the document's links (``Link``) can name the operation a response
leads to: the ids in an answer become the parameters of the next request, for clients and for
schemathesis' stateful tests.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from tidings import wiring
from tidings.logic import access, applications
from tidings.logic.access import Action, Principal
from tidings.logic.errors import NotFound, Unauthorized

AppPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        pattern=applications.UID_PATTERN,
        description="the application's uid, or its id (a uid wins when both match)",
        examples=[applications.DEFAULT_APP_UID],
    ),
]
# Every (method, path template) registered, for telling 405 from 404.
REGISTERED: list[tuple[str, str]] = []
# Those whose route reads a JSON body: a request to one must say it sends application/json.
READS_BODY: list[tuple[str, str]] = []


def _reads_body(hints: Mapping[str, Any]) -> bool:
    return any(
        isinstance(meta, Body)
        for hint in hints.values()
        if typing.get_origin(hint) is Annotated
        for meta in hint.__metadata__
    )


@dataclass(frozen=True, slots=True)
class AppScope:
    """The application a request acts in."""

    id: int
    uid: str


DEFAULT = AppScope(applications.DEFAULT_APP_ID, applications.DEFAULT_APP_UID)
# What the operation id of a route's variant at /v1/apps/<app>… adds to its function's name.
IN_APP_SUFFIX = "_in_app"
# The runtime expression of the application a request named in its path.
SAME_APPLICATION = "$request.path.app"


@dataclass(frozen=True, slots=True)
class Link:
    """An OpenAPI link from a response to the operation it leads to.

    ``operation`` is the target route's function name; ``parameters`` map the target's path and
    query parameters to runtime expressions (``$response.body#/id``). A target inside an
    application (``in_application``, registered by ``app_routes``) is followed in the same
    application: from a route at ``/v1/apps/<app>…`` to the target's variant there, with ``app``
    passed on, unless the parameters name the application themselves (from a created
    application's answer)."""

    operation: str
    parameters: Mapping[str, str]
    description: str
    in_application: bool = True

    def document(self, *, in_app: bool) -> dict[str, Any]:
        """The link as the document states it, from a route at ``/v1/apps/<app>…`` (``in_app``)
        or not."""
        parameters = dict(self.parameters)
        target = self.operation
        if self.in_application and (in_app or "app" in parameters):
            target += IN_APP_SUFFIX
            parameters = {"app": SAME_APPLICATION, **parameters}
        return {"operationId": target, "parameters": parameters, "description": self.description}


Links = Mapping[int, Mapping[str, Link]]


def _with_links(
    responses: Mapping[int, Any] | None, links: Links | None, *, in_app: bool
) -> dict[int, Any] | None:
    """``responses`` with each status code's links added, as seen from the route's variant."""
    if responses is None:
        return None
    found = {code: dict(answer) for code, answer in responses.items()}
    for code, named in (links or {}).items():
        found[code]["links"] = {name: link.document(in_app=in_app) for name, link in named.items()}
    return found


def principal_of(event: Mapping[str, Any]) -> Principal | None:
    """The principal the authorizer put in a proxy event's request context, if any."""
    context = event.get("requestContext")
    found = context.get("authorizer") if isinstance(context, Mapping) else None
    return Principal.from_context(found if isinstance(found, Mapping) else None)


def principal(router: Router) -> Principal:
    found = principal_of(router.current_event.raw_event)
    if found is None:
        raise Unauthorized("unauthorized", "a valid bearer token is required")
    return found


def acting_in(router: Router, action: Action, ref: str | None) -> AppScope:
    """The application the request may act in for ``action``: 'default' when ``ref`` is None."""
    who = principal(router)
    access.require(who, action)
    if ref is None:
        if not access.sees(who, DEFAULT.id):
            raise NotFound("application", DEFAULT.uid)
        return DEFAULT
    app = applications.visible(wiring.database(), ref, who)
    return AppScope(app.id, app.uid)


def app_routes(
    router: Router,
    method: str,
    path: str,
    *,
    action: Action,
    links: Links | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function, whose first parameter is the ``AppScope``, at
    ``/v1{path}`` (the default application) and at ``/v1/apps/<app>{path}``, with ``links``
    on its responses."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(func, include_extras=True)
        signature = inspect.signature(func)
        _scope, *rest = signature.parameters.values()
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in rest]
        returns = hints.get("return", inspect.Signature.empty)

        def in_default(**kwargs: Any) -> Any:
            return func(acting_in(router, action, None), **kwargs)

        def in_app(app: str, **kwargs: Any) -> Any:
            return func(acting_in(router, action, app), **kwargs)

        app_param = inspect.Parameter(
            "app", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=AppPath
        )
        variants: list[tuple[Any, str, list[inspect.Parameter], str]] = [
            (in_default, f"/v1{path}", params, ""),
            (in_app, f"/v1/apps/<app>{path}", [app_param, *params], IN_APP_SUFFIX),
        ]
        responses = options.pop("responses", None)
        for variant, full_path, variant_params, suffix in variants:
            functools.update_wrapper(variant, func, assigned=("__module__", "__doc__"), updated=())
            variant.__name__ = variant.__qualname__ = func.__name__ + suffix
            # Powertools reads the parameters (validation, OpenAPI) from the signature.
            variant.__signature__ = inspect.Signature(variant_params, return_annotation=returns)
            del variant.__wrapped__
            getattr(router, method.lower())(
                full_path,
                operation_id=variant.__name__,
                responses=_with_links(responses, links, in_app=bool(suffix)),
                **options,
            )(variant)
            REGISTERED.append((method.upper(), full_path))
            if _reads_body(hints):
                READS_BODY.append((method.upper(), full_path))
        return func

    return register


def route(
    router: Router, method: str, path: str, *, links: Links | None = None, **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a route that exists once (``/v1/apps``, ``/v1/tokens``), with ``links`` on its
    responses."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        responses = _with_links(options.pop("responses", None), links, in_app=False)
        getattr(router, method.lower())(
            path, operation_id=func.__name__, responses=responses, **options
        )(func)
        REGISTERED.append((method.upper(), path))
        if _reads_body(typing.get_type_hints(func, include_extras=True)):
            READS_BODY.append((method.upper(), path))
        return func

    return register
