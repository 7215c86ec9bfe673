"""A webhook receiver for Tidings deliveries, with the Standard Webhooks library.

    pip install standardwebhooks
    WEBHOOK_SECRET=whsec_... PAYLOAD_FORMAT=raw PORT=8000 python receiver.py

For every delivery whose signature verifies it prints one line,
``verified <webhook-id> <event type> <payload>``, and answers 204 at once; anything that does
not verify gets 400 (Tidings dead-letters it: a 4xx is not retried). Only the standard library
and ``standardwebhooks`` are used; a real receiver would sit in its web framework.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

# The endpoint's secret (whsec_...), as Tidings showed it when the endpoint was made.
webhook = Webhook(os.environ["WEBHOOK_SECRET"])
# The endpoint's payload_format: "raw" (the body is the producer's payload) or "envelope"
# (the body is {"type": ..., "timestamp": ..., "data": <payload>}).
PAYLOAD_FORMAT = os.environ.get("PAYLOAD_FORMAT", "raw")

# webhook-id is the same on every attempt of a message: a delivery seen before is answered 2xx
# again and not acted on twice. Kept in memory here; a real receiver records it with its effect,
# in one transaction (a table with a unique key on the id).
seen: set[str] = set()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        # The exact bytes received: the signature covers them, not a parsed-and-reserialized copy.
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            # Checks the signature and that webhook-timestamp is within 5 minutes of now.
            webhook.verify(body, dict(self.headers))
        except WebhookVerificationError:
            self.send_response(400)
            self.end_headers()
            return
        msg_id = self.headers["webhook-id"]
        # Percent-decoded: an event type with characters a header cannot carry arrives encoded.
        event_type = unquote(self.headers["webhook-event-type"])
        document = json.loads(body)
        payload = document["data"] if PAYLOAD_FORMAT == "envelope" else document
        if PAYLOAD_FORMAT == "envelope" and document["type"] != event_type:
            # The envelope names the type too; the header and the body always agree.
            self.send_response(400)
            self.end_headers()
            return
        # Answer first, work later: Tidings waits at most the endpoint's timeout (15 s by
        # default), and a slow answer is retried as a failure.
        self.send_response(204)
        self.end_headers()
        if msg_id in seen:
            return
        seen.add(msg_id)
        print("verified", msg_id, event_type, json.dumps(payload, sort_keys=True), flush=True)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Receiver)
    print(f"listening on http://127.0.0.1:{server.server_port}/", file=sys.stderr, flush=True)
    server.serve_forever()
