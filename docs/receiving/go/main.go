// A webhook receiver for Tidings deliveries, with the Standard Webhooks library.
//
//	WEBHOOK_SECRET=whsec_... PAYLOAD_FORMAT=raw PORT=8000 go run .
//
// For every delivery whose signature verifies it prints one line,
// "verified <webhook-id> <event type> <payload>", and answers 204 at once; anything that does not
// verify gets 400 (Tidings dead-letters it: a 4xx is not retried).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"sync"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// What an envelope body holds; with payload_format raw the body is the payload itself.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

func main() {
	// The endpoint's secret (whsec_...), as Tidings showed it when the endpoint was made.
	webhook, err := standardwebhooks.NewWebhook(os.Getenv("WEBHOOK_SECRET"))
	if err != nil {
		log.Fatalf("WEBHOOK_SECRET is not a whsec_ secret: %v", err)
	}
	payloadFormat := os.Getenv("PAYLOAD_FORMAT")
	port := os.Getenv("PORT")
	if port == "" {
		port = "8000"
	}
	// webhook-id is the same on every attempt of a message: a delivery seen before is answered
	// 2xx again and not acted on twice. In memory here; a real receiver records it with its
	// effect, in one transaction.
	var mu sync.Mutex
	seen := map[string]bool{}

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The exact bytes received: the signature covers them.
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// Checks the signature and that webhook-timestamp is within 5 minutes of now.
		if err := webhook.Verify(body, r.Header); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		msgID := r.Header.Get("webhook-id")
		// Percent-decoded: an event type with characters a header cannot carry arrives encoded.
		eventType, err := url.PathUnescape(r.Header.Get("webhook-event-type"))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		payload := json.RawMessage(body)
		if payloadFormat == "envelope" {
			var doc envelope
			if err := json.Unmarshal(body, &doc); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			payload = doc.Data
		}
		// Answer first, work later: Tidings waits at most the endpoint's timeout.
		w.WriteHeader(http.StatusNoContent)
		mu.Lock()
		defer mu.Unlock()
		if seen[msgID] {
			return
		}
		seen[msgID] = true
		fmt.Println("verified", msgID, eventType, string(payload))
	})
	log.Printf("listening on http://127.0.0.1:%s/", port)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
