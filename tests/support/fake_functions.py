"""Stand-in Lambda entry points that exercise the local runtime's plumbing, not delivery.

``write_fake_functions(folder)`` writes ``<name>/app.py`` files: the claimer puts one message on
the wired queue per invocation and then waits out its slice, the sender answers every record and
reports those whose body says "fail", the ingest echoes its event, the authorizer accepts the
token "good" (and refuses anything else), the portal answers every page, the scheduled ones
count runs. Each one appends what it
saw to ``calls.jsonl`` in the folder.
"""

from __future__ import annotations

from pathlib import Path

_RECORD = """
import json, os, pathlib, threading
_LOG = pathlib.Path(__file__).resolve().parent.parent / "calls.jsonl"
_LOCK = threading.Lock()

def record(**fields):
    with _LOCK, _LOG.open("a") as log:
        log.write(json.dumps(fields) + "\\n")
"""

_CLAIMER = (
    _RECORD
    + """
import itertools, time
from tidings import wiring
from tidings.queue import OutgoingMessage
_COUNTER = itertools.count()

def handler(event, context):
    assert event["detail-type"] == "Scheduled Event"
    wiring.database().run(lambda cur: cur.execute("SELECT 1"))
    body = f"message-{next(_COUNTER)}"
    wiring.delivery_queue().send_batch([OutgoingMessage(id="m", body=body)])
    record(function="claimer", body=body, remaining=context.get_remaining_time_in_millis())
    margin_ms = wiring.settings().claim_stop_before_timeout_s * 1000
    while context.get_remaining_time_in_millis() > margin_ms:
        time.sleep(0.01)
"""
)

_SENDER = (
    _RECORD
    + """
def handler(event, context):
    failures = []
    for r in event["Records"]:
        record(function="sender", body=r["body"], source=r["eventSourceARN"],
               function_name=context.function_name, pid=os.getpid())
        if r["body"].startswith("fail"):
            failures.append({"itemIdentifier": r["messageId"]})
    return {"batchItemFailures": failures}
"""
)

_INGEST = (
    _RECORD
    + """
import json

def handler(event, context):
    record(function="ingest", path=event["path"])
    if event["path"] == "/boom":
        raise RuntimeError("boom")
    return {"statusCode": 201, "headers": {"Content-Type": "application/json", "X-Echo": "1"},
            "body": json.dumps({"method": event["httpMethod"], "path": event["path"],
                                "query": event["queryStringParameters"], "body": event["body"],
                                "stage": event["requestContext"]["stage"],
                                "authorizer": event["requestContext"]["authorizer"]})}
"""
)

_AUTHORIZER = (
    _RECORD
    + """
def handler(event, context):
    record(function="authorizer", type=event["type"], method_arn=event["methodArn"])
    if event["authorizationToken"] != "Bearer good":
        raise Exception("Unauthorized")
    arn = event["methodArn"].split("/")[0]
    return {"principalId": "token-7",
            "policyDocument": {"Version": "2012-10-17", "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": [arn + "/*/*"]}]},
            "context": {"scope": "producer", "token_id": "7"}}
"""
)

_PORTAL = (
    _RECORD
    + """
def handler(event, context):
    record(function="portal", path=event["path"])
    return {"statusCode": 200, "headers": {"Content-Type": "text/html"}, "body": "portal"}
"""
)

_SCHEDULED = (
    _RECORD
    + """
def handler(event, context):
    record(function=context.function_name, source=event["source"])
"""
)


def write_fake_functions(folder: Path) -> Path:
    sources = {
        "claimer": _CLAIMER,
        "sender": _SENDER,
        "ingest": _INGEST,
        "authorizer": _AUTHORIZER,
        "portal": _PORTAL,
        "percentiles": _SCHEDULED,
        "health_monitor": _SCHEDULED,
        "dead_letter_report": _SCHEDULED,
        "pruner": _SCHEDULED,
    }
    for name, source in sources.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "app.py").write_text(source, encoding="utf-8")
    return folder
