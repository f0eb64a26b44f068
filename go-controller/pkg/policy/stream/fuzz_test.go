package stream

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// The stream's messages are what an agent reads from whoever answers at the controller's
// address (TLS authenticates the controller, but a controller bug must not crash every
// agent): each message is decoded and delivered as the client does (receiver.deliver onto
// a sink that applies deltas), and is refused or applied, never a panic.
func FuzzReceiveMessages(f *testing.F) {
	f.Add([]byte(`{"type":"snapshot","generation":1,"snapshot":{"node":"node1","generation":1}}` + "\n" +
		`{"type":"delta","generation":2,"delta":{"node":"node1","fromGeneration":1,"generation":2,` +
		`"addedAddressSets":[{"id":"a","addresses":["10.244.1.0/24"]}],"removedRules":["r"]}}` + "\n" +
		`{"type":"keepalive","generation":2}`))
	f.Add([]byte(`{"type":"delta","generation":2,"delta":{"node":"node1","fromGeneration":1,"generation":2}}`))
	f.Add([]byte(`{"type":"snapshot","generation":1,"snapshot":{"node":"node2","generation":1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rs := newReceiver("node1", newRecordingSink())
		dec := json.NewDecoder(bytes.NewReader(body))
		for {
			var m Message
			if dec.Decode(&m) != nil {
				return
			}
			if rs.deliver(m) != nil {
				return
			}
		}
	})
}

// A bearer token is the first thing anyone who reaches the stream's port controls:
// checkTokenShape refuses what cannot be a ServiceAccount token before any TokenReview,
// and never panics on what it is given.
func FuzzCheckTokenShape(f *testing.F) {
	f.Add("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrOHMiLCJhdWQiOlsia292cy1jb250cm9sbGVyIl0sImV4cCI6NDEwMjQ0NDgwMH0.c2ln")
	f.Add("eyJhbGciOiJub25lIn0.eyJhdWQiOiJrb3ZzLWNvbnRyb2xsZXIifQ.")
	f.Add("a word")
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, token string) {
		err := checkTokenShape(token, []string{TokenAudience}, now)
		if err == nil && bytes.Count([]byte(token), []byte(".")) != 2 {
			t.Fatalf("%q accepted as a JWT", token)
		}
		if err == nil && len(token) > maxTokenBytes {
			t.Fatalf("a %d-byte token accepted", len(token))
		}
	})
}
