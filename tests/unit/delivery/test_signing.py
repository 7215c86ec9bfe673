from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook, WebhookVerificationError

from tidings.delivery.signing import (
    generate_secret,
    secret_bytes,
    sign,
    signature_header,
    webhook_headers,
)

BODY = b'{"type":"invoice.paid","data":{"id":"in_1","amount":4200}}'
MSG_ID = "msg_2f8c1e"
Tamper = Callable[[dict[str, str], bytes], tuple[dict[str, str], bytes]]


def _now() -> int:
    # standardwebhooks refuses timestamps more than five minutes from its own clock.
    return int(time.time())


def test_generated_secret_has_the_standard_shape() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert secret_bytes(secret) == base64.b64decode(secret.removeprefix("whsec_"))


def test_generated_secrets_differ() -> None:
    assert len({generate_secret() for _ in range(100)}) == 100


def test_signature_matches_the_specification_by_hand() -> None:
    key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(key).decode()
    expected = hmac.new(key, f"{MSG_ID}.1700000000.".encode() + BODY, hashlib.sha256).digest()
    assert sign(secret, MSG_ID, 1_700_000_000, BODY) == "v1," + base64.b64encode(expected).decode()


def test_signature_is_verified_by_standardwebhooks() -> None:
    secret = generate_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, [secret])
    assert Webhook(secret).verify(BODY, headers) == {
        "type": "invoice.paid",
        "data": {"id": "in_1", "amount": 4200},
    }


def test_headers_carry_id_timestamp_and_signature() -> None:
    secret = generate_secret()
    timestamp = _now()
    headers = webhook_headers(MSG_ID, timestamp, BODY, [secret])
    assert headers == {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, MSG_ID, timestamp, BODY),
    }


def test_rotation_signs_with_both_secrets_and_either_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    headers = webhook_headers(MSG_ID, _now(), BODY, [new, old])
    parts = headers["webhook-signature"].split(" ")
    assert len(parts) == 2
    assert all(part.startswith("v1,") for part in parts)
    Webhook(old).verify(BODY, headers, json_parse=False)
    Webhook(new).verify(BODY, headers, json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers, json_parse=False)


def test_wrong_secret_fails_verification() -> None:
    headers = webhook_headers(MSG_ID, _now(), BODY, [generate_secret()])
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(BODY, headers)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: (h, b + b" "),
        lambda h, b: ({**h, "webhook-id": "msg_other"}, b),
        lambda h, b: ({**h, "webhook-timestamp": str(int(h["webhook-timestamp"]) - 1)}, b),
    ],
    ids=["body", "id", "timestamp"],
)
def test_any_change_breaks_the_signature(tamper: Tamper) -> None:
    secret = generate_secret()
    headers, body = tamper(webhook_headers(MSG_ID, _now(), BODY, [secret]), BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers, json_parse=False)


@settings(max_examples=50)
@given(
    body=st.text(max_size=300).map(str.encode),
    msg_id=st.text(
        alphabet=st.characters(categories=("L", "N"), include_characters="_-."),
        min_size=1,
        max_size=40,
    ),
    n_secrets=st.integers(min_value=1, max_value=3),
)
def test_any_body_and_id_verify(body: bytes, msg_id: str, n_secrets: int) -> None:
    secrets = [generate_secret() for _ in range(n_secrets)]
    headers = webhook_headers(msg_id, _now(), body, secrets)
    for secret in secrets:
        Webhook(secret).verify(body, headers, json_parse=False)


def test_signing_is_deterministic() -> None:
    secret = generate_secret()
    assert sign(secret, MSG_ID, 5, BODY) == sign(secret, MSG_ID, 5, BODY)
    assert sign(secret, MSG_ID, 5, BODY) != sign(secret, MSG_ID, 6, BODY)


# --- bad input, and secrets kept out of errors --------------------------------------------------


SECRET_LOOKALIKES = [
    "s3cr3t-value-that-must-stay-hidden",  # no prefix
    "whsec_not*base64*at*all*hidden",  # not base64
    "whsec_" + base64.b64encode(b"short-hidden").decode(),  # too short
    "whsec_" + base64.b64encode(b"x" * 65).decode(),  # too long
    "whsec_",  # empty
]


@pytest.mark.parametrize("bad", SECRET_LOOKALIKES)
def test_bad_secrets_are_refused_without_revealing_them(bad: str) -> None:
    with pytest.raises(ValueError, match="signing secret") as caught:
        sign(bad, MSG_ID, _now(), BODY)
    revealing = [bad, bad.removeprefix("whsec_")] if bad != "whsec_" else []
    chain: list[BaseException] = [caught.value]
    if caught.value.__cause__ is not None:
        chain.append(caught.value.__cause__)
    if caught.value.__context__ is not None and not caught.value.__suppress_context__:
        chain.append(caught.value.__context__)
    for exc in chain:
        for text in (str(exc), repr(exc)):
            assert not any(secret in text for secret in revealing)


def test_good_secret_stays_out_of_errors_about_other_arguments() -> None:
    secret = generate_secret()
    calls: list[Callable[[], str]] = [
        lambda: sign(secret, "", 1, BODY),
        lambda: sign(secret, MSG_ID, -1, BODY),
        lambda: sign(secret, "id with space", 1, BODY),
    ]
    for call in calls:
        with pytest.raises(ValueError) as caught:
            call()
        assert secret not in str(caught.value)
        assert secret.removeprefix("whsec_") not in repr(caught.value)


def test_secret_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        secret_bytes(b"whsec_abc")  # type: ignore[arg-type]


def test_at_least_one_secret() -> None:
    with pytest.raises(ValueError, match="at least one"):
        signature_header([], MSG_ID, 1, BODY)


def test_a_single_str_is_not_a_list_of_secrets() -> None:
    with pytest.raises(TypeError, match="not a single str"):
        signature_header(generate_secret(), MSG_ID, 1, BODY)


@pytest.mark.parametrize("bad_id", ["", "a b", "a\nb", "tab\there"])
def test_bad_message_ids_are_refused(bad_id: str) -> None:
    with pytest.raises(ValueError, match="msg_id"):
        sign(generate_secret(), bad_id, 1, BODY)


@pytest.mark.parametrize("bad_ts", [-1, True, 1.5])
def test_bad_timestamps_are_refused(bad_ts: object) -> None:
    with pytest.raises(ValueError, match="timestamp"):
        sign(generate_secret(), MSG_ID, bad_ts, BODY)  # type: ignore[arg-type]


def test_body_must_be_bytes() -> None:
    with pytest.raises(TypeError, match="body must be bytes"):
        sign(generate_secret(), MSG_ID, 1, BODY.decode())  # type: ignore[arg-type]
