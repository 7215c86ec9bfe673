"""Signature checks with the reference Standard Webhooks library, for receivers in tests."""

from __future__ import annotations

from collections.abc import Mapping

from standardwebhooks import Webhook, WebhookVerificationError


def standard_verifier(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    try:
        Webhook(secret).verify(body, dict(headers), json_parse=False)
    except WebhookVerificationError:
        return False
    return True
