"""The local API Gateway: the authorizer before the handler, its refusals in the API's error
shape, the loopback access of a fresh runtime, 405 for methods it does not route, and one
request at a time."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from tidings.local.api_server import Gateway, _allows, method_arn
from tidings.local.lambda_env import HttpRequest

ARN = "arn:aws:execute-api:us-east-1:000000000000:local/local/GET/v1/endpoints"


def request(
    method: str = "GET",
    target: str = "/v1/endpoints",
    token: str | None = None,
    source_ip: str = "127.0.0.1",
    headers: tuple[tuple[str, str], ...] = (("Host", "127.0.0.1:8080"),),
) -> HttpRequest:
    if token is not None:
        headers = (*headers, ("Authorization", f"Bearer {token}"))
    return HttpRequest(method, target, headers, b"", source_ip)


def policy(effect: str, resource: str, context: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "principalId": "token-3",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": effect, "Resource": [resource]}
            ],
        },
        "context": context or {"scope": "producer", "token_id": "3"},
    }


class Recorder:
    """An ingest handler that answers with the authorizer context it was given."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "body": json.dumps(event["requestContext"]["authorizer"])}


def authorizer_accepting(token: str, answer: dict[str, Any] | None = None) -> Any:
    def authorize(event: dict[str, Any], context: Any) -> dict[str, Any]:
        assert event["type"] == "TOKEN"
        if event["authorizationToken"] != f"Bearer {token}":
            raise Exception("Unauthorized")
        return answer or policy("Allow", event["methodArn"].split("/")[0] + "/*/*")

    return authorize


def error_of(body: bytes) -> dict[str, str]:
    found = json.loads(body)["error"]
    assert set(found) == {"code", "message"}
    return dict(found)


def test_a_valid_token_reaches_the_handler_with_the_authorizer_context() -> None:
    handler = Recorder()
    reply = Gateway(handler, authorizer_accepting("t")).answer(request(token="t"))
    assert reply.status == 200
    assert json.loads(reply.body) == {
        "principalId": "token-3",
        "scope": "producer",
        "token_id": "3",
    }


def test_refusals_are_401_in_the_error_shape_and_never_reach_the_handler() -> None:
    handler = Recorder()
    gateway = Gateway(handler, authorizer_accepting("t"))
    for refused in (request(token="other"), request(), request(source_ip="10.1.2.3")):
        reply = gateway.answer(refused)
        assert reply.status == 401
        assert error_of(reply.body)["code"] == "unauthorized"
    assert handler.events == []


def test_without_any_token_loopback_requests_pass_as_an_admin_and_only_they() -> None:
    handler = Recorder()
    gateway = Gateway(handler, authorizer_accepting("t"), open_access=lambda: True)
    for address in ("127.0.0.1", "127.8.9.10", "::1"):
        reply = gateway.answer(request(source_ip=address))
        assert reply.status == 200, address
        assert json.loads(reply.body) == {"principalId": "local-loopback", "scope": "admin"}
    for address in ("10.0.0.8", "192.168.1.2", "::ffff:10.0.0.8", "not an address"):
        assert gateway.answer(request(source_ip=address)).status == 401, address
    # A token that is presented is checked even then.
    assert gateway.answer(request(token="wrong")).status == 401


def test_without_any_token_what_a_web_page_could_send_is_refused() -> None:
    handler = Recorder()
    gateway = Gateway(handler, authorizer_accepting("t"), open_access=lambda: True)
    for headers, code in (
        ((("Host", "rebind.attacker.example:8080"),), "foreign_host"),
        ((("Host", "127.0.0.1:8080"), ("Host", "attacker.example")), "foreign_host"),
        ((("Host", "[::1]x"),), "foreign_host"),
        ((("Host", "::1"),), "foreign_host"),
        ((), "foreign_host"),
        ((("Host", "localhost:8080"), ("Origin", "https://attacker.example")), "foreign_origin"),
        ((("Host", "localhost:8080"), ("Origin", "null")), "foreign_origin"),
        ((("Host", "localhost"), ("Origin", "http://127.0.0.1.nip.io:8080")), "foreign_origin"),
        ((("Host", "localhost"), ("Origin", "file://")), "foreign_origin"),
    ):
        reply = gateway.answer(request(headers=headers))
        assert (reply.status, error_of(reply.body)["code"]) == (403, code), headers
    assert handler.events == []
    for headers in (
        (("Host", "localhost:8080"),),
        (("host", "LocalHost"),),
        (("Host", "127.8.9.10"),),
        (("Host", "[::1]:8080"),),
        (("Host", "[::1]"),),
        (("Host", "127.0.0.1:8080"), ("Origin", "http://localhost:5173")),
        (("Host", "[::1]:8080"), ("Origin", "https://[::1]")),
    ):
        assert gateway.answer(request(headers=headers)).status == 200, headers
    # Once a token exists, a token is what counts, whichever page sent it.
    closed = Gateway(handler, authorizer_accepting("t"))
    foreign = (("Host", "tidings.example"), ("Origin", "https://app.example"))
    assert closed.answer(request(token="t", headers=foreign)).status == 200


def test_a_deny_or_a_policy_for_another_resource_is_403() -> None:
    for answer in (
        policy("Deny", "*"),
        policy("Allow", "arn:aws:execute-api:us-east-1:000000000000:other/*/*"),
        {"principalId": "x"},
    ):
        reply = Gateway(Recorder(), authorizer_accepting("t", answer)).answer(request(token="t"))
        assert reply.status == 403
        assert error_of(reply.body)["code"] == "forbidden"


def test_a_failing_authorizer_is_500_and_a_failing_handler_502() -> None:
    def broken(event: dict[str, Any], context: Any) -> Any:
        raise RuntimeError("database down")

    reply = Gateway(Recorder(), broken).answer(request(token="t"))
    assert (reply.status, error_of(reply.body)["code"]) == (500, "authorizer_failed")
    reply = Gateway(broken, authorizer_accepting("t")).answer(request(token="t"))
    assert (reply.status, error_of(reply.body)["code"]) == (502, "bad_gateway")


def test_methods_api_gateway_does_not_route_are_405_with_allow() -> None:
    handler = Recorder()
    gateway = Gateway(handler, authorizer_accepting("t"))
    for method in ("TRACE", "CONNECT", "PROPFIND"):
        reply = gateway.answer(request(method, "/v1/endpoints/3", token="t"))
        assert reply.status == 405
        assert error_of(reply.body)["code"] == "method_not_allowed"
        assert dict(reply.headers)["Allow"] == "DELETE, GET, PATCH"
    assert dict(gateway.answer(request("TRACE", "/nothing")).headers)["Allow"] == ""
    assert handler.events == []


def test_policies_are_read_as_api_gateway_reads_them() -> None:
    assert _allows(policy("Allow", "arn:aws:execute-api:us-east-1:000000000000:local/*/*"), ARN)
    assert _allows(policy("Allow", ARN), ARN)
    assert not _allows(policy("Allow", ARN.replace("GET", "POST")), ARN)
    both = policy("Allow", "*")
    both["policyDocument"]["Statement"].append(
        {"Action": "execute-api:Invoke", "Effect": "Deny", "Resource": [ARN]}
    )
    assert not _allows(both, ARN)
    assert method_arn(request("POST", "/v1/events?x=1")).endswith("local/local/POST/v1/events")


def test_requests_are_handled_one_at_a_time() -> None:
    busy = threading.Lock()
    overlaps: list[int] = []

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not busy.acquire(blocking=False):
            overlaps.append(1)
            return {"statusCode": 500, "body": ""}
        try:
            time.sleep(0.01)
            return {"statusCode": 200, "body": ""}
        finally:
            busy.release()

    gateway = Gateway(slow, authorizer_accepting("t"))
    threads = [
        threading.Thread(target=lambda: gateway.answer(request(token="t"))) for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []


def test_a_server_bound_but_never_started_stops_at_once() -> None:
    import threading

    from tidings.local.api_server import ApiServer

    server = ApiServer(lambda event, context: {}, port=0)
    stopper = threading.Thread(target=server.stop, daemon=True)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive()
