package stream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

func agentServer(t *testing.T, src Source, rep Reports) *testServer {
	return startServer(t, ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser},
		Reports: rep, KeepaliveInterval: 50 * time.Millisecond}, newTestPKI(t))
}

func TestSnapshotThenDeltasReachTheSinkInOrder(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	ts := agentServer(t, src, nil)
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	src.change(t, "node1", addAddressSet("b", "10.0.0.2/32"))
	src.change(t, "node1", func(d *policy.Delta) {
		d.UpdatedAddressSets = []policy.AddressSetPatch{{ID: "a", Added: addrs("10.0.0.3/32")}}
	})
	src.change(t, "node1", func(d *policy.Delta) { d.RemovedAddressSets = []string{"b"} })
	sink.waitShare(t, src.share("node1"))
	if want := []string{"snapshot 2", "delta 2->3", "delta 3->4", "delta 4->5"}; !slices.Equal(sink.log(), want) {
		t.Errorf("the sink got %q, want %q", sink.log(), want)
	}
}

func TestReconnectAfterServerRestartConverges(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	ts := agentServer(t, src, nil)
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	ts.restart(func() {
		// What changes while the controller is away reaches the agent in the new snapshot.
		src.change(t, "node1", addAddressSet("b", "10.0.0.2/32"))
		src.change(t, "node1", func(d *policy.Delta) { d.RemovedAddressSets = []string{"a"} })
	})
	sink.waitShare(t, src.share("node1"))
	src.change(t, "node1", addAddressSet("c", "10.0.0.3/32"))
	sink.waitShare(t, src.share("node1"))
	log := sink.log()
	if log[0] != "snapshot 2" || log[len(log)-2] != "snapshot 4" || log[len(log)-1] != "delta 4->5" {
		t.Errorf("the sink got %q, want a snapshot at 2, a snapshot at 4 after the restart, then delta 4->5", log)
	}
}

func TestSinkErrorTriggersAFreshSnapshot(t *testing.T) {
	src := newFakeSource()
	ts := agentServer(t, src, nil)
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	sink.failNextDelta(fmt.Errorf("missed one: %w", policy.ErrGeneration))
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	sink.waitShare(t, src.share("node1"))
	if want := []string{"snapshot 1", "refused 1->2", "snapshot 2"}; !slices.Equal(sink.log(), want) {
		t.Errorf("the sink got %q, want %q", sink.log(), want)
	}
	if n := src.watchCount("node1"); n != 2 {
		t.Errorf("%d subscriptions, want 2 (the first, and one for the fresh snapshot)", n)
	}
}

// Every generation written to a node's stream is told to ServerConfig.Sent, after its
// write, so that the scale harness can split kovs-controller's part from the agent's.
func TestSentIsToldOfEveryWrittenGeneration(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	var mu sync.Mutex
	var sent []string
	ts := startServer(t, ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser},
		KeepaliveInterval: 50 * time.Millisecond, Sent: func(node string, gen uint64) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, fmt.Sprintf("%s %d", node, gen))
		}}, newTestPKI(t))
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	src.change(t, "node1", addAddressSet("b", "10.0.0.2/32"))
	sink.waitShare(t, src.share("node1"))
	// Told after the write returns: the agent may have the delta first.
	eventually(t, "Sent told of the snapshot and the delta", func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"node1 2", "node1 3"}; !slices.Equal(sent, want) {
			return fmt.Errorf("Sent was told %q, want %q (no keepalive)", sent, want)
		}
		return nil
	})
}

func TestRealizedGenerationsReachTheController(t *testing.T) {
	src := newFakeSource()
	rep := &reports{}
	ts := agentServer(t, src, rep)
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	for i := range 3 {
		src.change(t, "node1", addAddressSet(fmt.Sprint(i), fmt.Sprintf("10.0.0.%d/32", i)))
	}
	want := src.share("node1").Generation
	eventually(t, "node1's realized generation", func() error {
		if got := rep.of("node1"); got != want {
			return fmt.Errorf("controller has %d, want %d", got, want)
		}
		return nil
	})
	// A report of a generation never sent is refused.
	c := rawClient(ts)
	if code := c.post(t, "node1", "agent-node1", want+1); code != http.StatusConflict {
		t.Errorf("report of an unsent generation: %d, want 409", code)
	}
	if rep.of("node1") != want {
		t.Errorf("the refused report changed the realized generation to %d", rep.of("node1"))
	}
}

// A realized generation left over from an earlier connection is not reported as the
// current connection's.
func TestStaleRealizedGenerationIsNotReported(t *testing.T) {
	src := newFakeSource()
	rep := &reports{}
	ts := agentServer(t, src, rep)
	sink := &laggingSink{recordingSink: newRecordingSink(), stale: 1000}
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	time.Sleep(100 * time.Millisecond)
	if got := rep.of("node1"); got != 0 {
		t.Errorf("reported %d, a generation this connection never delivered", got)
	}
}

// laggingSink reports a stale generation, as an agent still enforcing an old snapshot.
type laggingSink struct {
	*recordingSink
	stale uint64
}

func (s *laggingSink) Realized() uint64 { return s.stale }

func TestRefusals(t *testing.T) {
	ts := agentServer(t, newFakeSource(), &reports{})
	c := rawClient(ts)
	cases := []struct {
		name, node, token string
		want              int
	}{
		{"no token", "node1", "", http.StatusUnauthorized},
		{"unknown token", "node1", "forged", http.StatusUnauthorized},
		{"another node's share", "node2", "agent-node1", http.StatusForbidden},
		{"not the agents' ServiceAccount", "node1", "other-node1", http.StatusForbidden},
		{"token not bound to a node", "node1", "agent-nobind", http.StatusForbidden},
		{"own share", "node1", "agent-node1", http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.get(t, tc.node, tc.token); got != tc.want {
				t.Errorf("GET policy: %d, want %d", got, tc.want)
			}
			want := tc.want
			if want == http.StatusOK {
				want = http.StatusNoContent
			}
			if got := c.post(t, tc.node, tc.token, 0); got != want {
				t.Errorf("POST realized: %d, want %d", got, want)
			}
		})
	}
}

// An agent pointed at another node's share gets nothing, and keeps retrying.
func TestClientOfAnotherNodeGetsNothing(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node2", addAddressSet("secret", "10.0.0.9/32"))
	ts := agentServer(t, src, nil)
	sink := newRecordingSink()
	runClient(t, ts, "node2", "agent-node1", sink)
	time.Sleep(300 * time.Millisecond)
	if log := sink.log(); len(log) != 0 {
		t.Errorf("the sink got %q from another node's share", log)
	}
}

func TestClientVerifiesTheController(t *testing.T) {
	src := newFakeSource()
	for _, tc := range []struct {
		name string
		pki  testPKI
	}{
		{"certificate of another CA", newTestPKI(t)},
		{"certificate for another name", newTestPKI(t, "evil.example")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser}}, tc.pki)
			if tc.name == "certificate of another CA" {
				ts.pki.roots = newTestPKI(t).roots // the client trusts another CA
			}
			sink := newRecordingSink()
			runClient(t, ts, "node1", "agent-node1", sink)
			time.Sleep(200 * time.Millisecond)
			if log := sink.log(); len(log) != 0 {
				t.Errorf("the client accepted the server: %q", log)
			}
		})
	}
}

func TestStreamIsTLS13WithKeepalives(t *testing.T) {
	ts := agentServer(t, newFakeSource(), nil)
	c := rawClient(ts)
	resp := c.do(t, http.MethodGet, PolicyPath("node1"), "agent-node1", "")
	defer resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Fatalf("connection state %+v, want TLS 1.3", resp.TLS)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q, want %q", ct, ContentType)
	}
	lines := bufio.NewScanner(resp.Body)
	var types []MessageType
	for len(types) < 3 && lines.Scan() {
		var m Message
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		types = append(types, m.Type)
	}
	if want := []MessageType{MessageSnapshot, MessageKeepalive, MessageKeepalive}; !slices.Equal(types, want) {
		t.Errorf("messages %q, want %q", types, want)
	}
}

// A connection that goes silent (no keepalives) is dropped and replaced.
func TestClientReconnectsWhenTheStreamGoesSilent(t *testing.T) {
	src := newFakeSource()
	ts := startServer(t, ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser},
		KeepaliveInterval: time.Hour}, newTestPKI(t))
	c, err := NewClient(ClientConfig{Node: "node1", Address: ts.addr, Token: func() (string, error) { return "agent-node1", nil },
		RootCAs: func(context.Context) (*x509.CertPool, error) { return ts.pki.roots, nil }, IdleTimeout: 100 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx, newRecordingSink()) }()
	eventually(t, "a second subscription", func() error {
		if n := src.watchCount("node1"); n < 2 {
			return fmt.Errorf("%d subscriptions", n)
		}
		return nil
	})
}

func TestOldestStreamOfANodeIsClosedForANewOne(t *testing.T) {
	ts := agentServer(t, newFakeSource(), nil)
	c := rawClient(ts)
	var bodies []*bufio.Scanner
	for range 3 {
		resp := c.do(t, http.MethodGet, PolicyPath("node1"), "agent-node1", "")
		defer resp.Body.Close()
		bodies = append(bodies, bufio.NewScanner(resp.Body))
	}
	ended := func(s *bufio.Scanner) bool {
		for s.Scan() {
		}
		return true
	}
	done := make(chan bool, 1)
	go func() { done <- ended(bodies[0]) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the oldest of three streams of node1 is still open")
	}
}

func TestRebaseOffsetsEveryGeneration(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	ts := agentServer(t, Rebase(src, 1000), nil)
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	rebased := func() policy.NodeShare {
		s := src.share("node1")
		s.Generation += 1000
		return s
	}
	sink.waitShare(t, rebased())
	src.change(t, "node1", addAddressSet("b", "10.0.0.2/32"))
	sink.waitShare(t, rebased())
	if log := sink.log(); !slices.Equal(log, []string{"snapshot 1002", "delta 1002->1003"}) {
		t.Errorf("the sink got %q", log)
	}
}

// rawHTTP is a plain HTTPS client of the test server.
type rawHTTP struct {
	ts *testServer
	c  *http.Client
}

func rawClient(ts *testServer) rawHTTP {
	return rawHTTP{ts: ts, c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: ts.pki.roots, ServerName: DefaultServerName}}}}
}

func (r rawHTTP) do(t *testing.T, method, path, token, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, "https://"+r.ts.addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := *r.c
	c.Timeout = 0 // streams stay open
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (r rawHTTP) get(t *testing.T, node, token string) int {
	resp := r.do(t, http.MethodGet, PolicyPath(node), token, "")
	resp.Body.Close()
	return resp.StatusCode
}

func (r rawHTTP) post(t *testing.T, node, token string, gen uint64) int {
	resp := r.do(t, http.MethodPost, RealizedPath(node), token, fmt.Sprintf(`{"generation":%d}`, gen))
	resp.Body.Close()
	return resp.StatusCode
}

// revocable lets the test revoke tokens while the server runs.
type revocable struct {
	mu      sync.Mutex
	revoked map[string]bool
}

func (r *revocable) Authenticate(ctx context.Context, token string) (Identity, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked[token] {
		return Identity{}, fmt.Errorf("revoked: %w", ErrUnauthenticated)
	}
	return testTokens.Authenticate(ctx, token)
}

func (r *revocable) revoke(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revoked[token] = true
}

// An open stream dies with its credential.
func TestStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	src := newFakeSource()
	auth := &revocable{revoked: map[string]bool{}}
	ts := startServer(t, ServerConfig{Source: src, Authenticator: auth, Authorizer: AgentAuthorizer{User: agentUser},
		ReauthInterval: 20 * time.Millisecond}, newTestPKI(t))
	sink := newRecordingSink()
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	auth.revoke("agent-node1")
	src.waitUnsubscribed(t, "node1")
	time.Sleep(100 * time.Millisecond)
	if n := src.watchCount("node1"); n != 1 {
		t.Errorf("%d subscriptions, want 1: the revoked token got in again", n)
	}
}
