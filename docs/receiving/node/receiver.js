// A webhook receiver for Tidings deliveries, with the Standard Webhooks library.
//
//     npm ci
//     WEBHOOK_SECRET=whsec_... PAYLOAD_FORMAT=raw PORT=8000 node receiver.js
//
// For every delivery whose signature verifies it prints one line,
// `verified <webhook-id> <event type> <payload>`, and answers 204 at once; anything that does not
// verify gets 400 (Tidings dead-letters it: a 4xx is not retried). Only Node's own http module
// and `standardwebhooks` are used; a real receiver would sit in its web framework.
"use strict";

const http = require("node:http");
const { Webhook } = require("standardwebhooks");

// The endpoint's secret (whsec_...), as Tidings showed it when the endpoint was made.
const webhook = new Webhook(process.env.WEBHOOK_SECRET);
// The endpoint's payload_format: "raw" (the body is the producer's payload) or "envelope"
// (the body is {"type": ..., "timestamp": ..., "data": <payload>}).
const payloadFormat = process.env.PAYLOAD_FORMAT || "raw";

// webhook-id is the same on every attempt of a message: a delivery seen before is answered 2xx
// again and not acted on twice. Kept in memory here; a real receiver records it with its effect,
// in one transaction (a table with a unique key on the id).
const seen = new Set();

// Keys sorted, so that a payload prints the same whatever the order it came in.
function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]));
  }
  return value;
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    // The exact bytes received: the signature covers them, not a parsed-and-reserialized copy.
    const body = Buffer.concat(chunks).toString("utf8");
    try {
      // Checks the signature and that webhook-timestamp is within 5 minutes of now.
      webhook.verify(body, req.headers);
    } catch (err) {
      res.writeHead(400).end();
      return;
    }
    const msgId = req.headers["webhook-id"];
    // Percent-decoded: an event type with characters a header cannot carry arrives encoded.
    const eventType = decodeURIComponent(req.headers["webhook-event-type"]);
    const document = JSON.parse(body);
    const payload = payloadFormat === "envelope" ? document.data : document;
    if (payloadFormat === "envelope" && document.type !== eventType) {
      // The envelope names the type too; the header and the body always agree.
      res.writeHead(400).end();
      return;
    }
    // Answer first, work later: Tidings waits at most the endpoint's timeout (15 s by default),
    // and a slow answer is retried as a failure.
    res.writeHead(204).end();
    if (seen.has(msgId)) return;
    seen.add(msgId);
    console.log("verified", msgId, eventType, JSON.stringify(sorted(payload)));
  });
});

server.listen(Number(process.env.PORT || 8000), "127.0.0.1", () => {
  console.error(`listening on http://127.0.0.1:${server.address().port}/`);
});
