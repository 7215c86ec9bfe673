"""Per-caller throttling on AWS: one API Gateway API key per token (and one per application for
all its portal links and sessions, which are made per page view and would otherwise exhaust the
account's API keys).

API Gateway's usage plan throttles each API key on its own. With the API's key source set to
AUTHORIZER, the key is not something a caller sends: the Lambda authorizer names it
(``usageIdentifierKey``) for each token it accepts, so every token gets its own throttle. The key
is made on the token's first request (tokens are also made from the command line, which has no
AWS credentials), its id remembered in the database, and its value derived from the usage plan's
name and its owner (``token-<id>``, or ``portal-app-<application id>``): a value API Gateway
knows only after the key exists, and that a caller cannot use, since API Gateway ignores
``x-api-key`` headers with this key source.

Locally there is no usage plan: ``NoUsageKeys`` names none.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from tidings.observability import logger


class UsageKeys(Protocol):
    def value_for(self, owner: str) -> str | None:
        """The usage identifier key of an owner whose API key exists (None: no throttling)."""
        ...

    def ensure(self, owner: str) -> str | None:
        """Make the owner's API key and add it to the usage plan (both idempotent); its id."""
        ...


class NoUsageKeys:
    """No usage plan (the local runtime): no key names any caller."""

    def value_for(self, owner: str) -> str | None:
        return None

    def ensure(self, owner: str) -> str | None:
        return None


class ApiGatewayUsageKeys:
    """API keys in the usage plan named ``usage_plan_name`` (looked up by name: the authorizer
    cannot be given its id, which depends on the API that depends on the authorizer)."""

    def __init__(self, usage_plan_name: str, client: Any) -> None:
        self._plan_name = usage_plan_name
        self._client = client
        self._plan_id: str | None = None

    def value_for(self, owner: str) -> str:
        # At least 20 characters, as API Gateway requires; unique per stack (the plan's name is).
        return f"{self._plan_name}-{owner}"

    def ensure(self, owner: str) -> str:
        value = self.value_for(owner)
        errors = self._client.exceptions
        try:
            key_id = str(
                self._client.create_api_key(
                    name=value,
                    value=value,
                    enabled=True,
                    description=f"Throttles the requests of Tidings {owner}",
                )["id"]
            )
        except errors.ConflictException:
            # Another invocation made it first (or the key was made and adding it failed).
            key_id = self._key_id_named(value)
        # Already in the plan: another invocation added it.
        with contextlib.suppress(errors.ConflictException):
            self._client.create_usage_plan_key(
                usagePlanId=self._usage_plan_id(), keyId=key_id, keyType="API_KEY"
            )
        logger.info("usage key ready", extra={"owner": owner, "api_key_id": key_id})
        return key_id

    def _key_id_named(self, name: str) -> str:
        pages = self._client.get_paginator("get_api_keys").paginate(nameQuery=name)
        for page in pages:
            for item in page.get("items", []):
                if item.get("name") == name:
                    return str(item["id"])
        raise LookupError(f"API key {name} exists and cannot be found")

    def _usage_plan_id(self) -> str:
        if self._plan_id is None:
            for page in self._client.get_paginator("get_usage_plans").paginate():
                for plan in page.get("items", []):
                    if plan.get("name") == self._plan_name:
                        self._plan_id = str(plan["id"])
            if self._plan_id is None:
                raise LookupError(f"no usage plan named {self._plan_name}")
        return self._plan_id
