package tokenflood_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// junkKind is what a junk request presents.
type junkKind int

const (
	// noToken: no Authorization header.
	noToken junkKind = iota
	// malformed: a token that cannot be a ServiceAccount token for the stream's audience
	// (not a JWT, an unsigned JWT, a JWT for another audience): refused without a
	// TokenReview.
	malformed
	// badSignature: an agent's token with its claims changed (a unique jti) and a
	// signature of random bytes, under the key ID of the issuer's key: the controller
	// verifies it with that key and refuses it without a TokenReview.
	badSignature
	// unknownKey: the same under a key ID the issuer does not publish: the controller
	// cannot tell it from a token of a key it has not read yet without asking
	// kube-apiserver, so each costs a TokenReview unless limited.
	unknownKey
	junkKinds
)

func (k junkKind) String() string {
	return [...]string{"no token", "malformed", "bad signature", "unknown key"}[k]
}

// junkRequest is one request of the flood: a GET of a node's share.
type junkRequest struct {
	kind  junkKind
	token string
	node  string
}

// junkRequests returns n requests, the kinds in turn, every token distinct (none can be
// answered from a cache). agentToken is a real agent's token, the template of the
// bad-signature ones.
func junkRequests(tb testing.TB, n int, agentToken string) []junkRequest {
	tb.Helper()
	parts := strings.Split(agentToken, ".")
	if len(parts) != 3 {
		tb.Fatalf("the agent's token is not a JWT: %d parts", len(parts))
	}
	var claims, header map[string]any
	if err := decodeJSON(parts[1], &claims); err != nil {
		tb.Fatalf("the agent's token claims: %v", err)
	}
	if err := decodeJSON(parts[0], &header); err != nil {
		tb.Fatalf("the agent's token header: %v", err)
	}
	sigLen := len(parts[2]) * 3 / 4
	reqs := make([]junkRequest, n)
	for i := range reqs {
		r := junkRequest{kind: junkKind(i % int(junkKinds)), node: []string{"node1", "node2"}[i%2]}
		switch r.kind {
		case malformed:
			r.token = malformedToken(tb, i, parts[0], claims)
		case badSignature, unknownKey:
			claims["jti"] = fmt.Sprintf("tokenflood-%d-%s", i, randomText(tb, 6))
			head := parts[0]
			if r.kind == unknownKey {
				header["kid"] = "tokenflood-" + randomText(tb, 8)
				head = encodeJSON(tb, header)
			}
			r.token = head + "." + encodeJSON(tb, claims) + "." + randomText(tb, sigLen)
		}
		reqs[i] = r
	}
	return reqs
}

// malformedToken is the i-th of four kinds of tokens the shape check refuses.
func malformedToken(tb testing.TB, i int, header string, claims map[string]any) string {
	switch i / int(junkKinds) % 4 {
	case 0:
		return "junk-" + randomText(tb, 24)
	case 1:
		return randomText(tb, 12) + "." + randomText(tb, 12)
	case 2: // unsigned
		return encodeJSON(tb, map[string]any{"alg": "none"}) + "." + encodeJSON(tb, withJTI(claims, i)) + "."
	default: // for kube-apiserver, not for the stream
		other := withJTI(claims, i)
		other["aud"] = []string{"https://kubernetes.default.svc"}
		return header + "." + encodeJSON(tb, other) + "." + randomText(tb, 256)
	}
}

func withJTI(claims map[string]any, i int) map[string]any {
	out := make(map[string]any, len(claims)+1)
	for k, v := range claims {
		out[k] = v
	}
	out["jti"] = "tokenflood-malformed-" + strconv.Itoa(i)
	return out
}

func randomText(tb testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func encodeJSON(tb testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeJSON(part string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// junkAnswer is what one junk request got.
type junkAnswer struct {
	code       int
	retryAfter string
	err        error
	// shaken and at are when the TLS handshake ended and the answer came, since the
	// flood's release.
	shaken, at time.Duration
}

// flood is a set of junk requests, each on its own connection, dialled in advance from
// node1's namespace (to the node's 127.0.0.1:9443, which the node forwards to the
// controller, as an agent reaches it) and released at once: the TLS handshakes and the
// requests all run concurrently.
type flood struct {
	reqs     []junkRequest
	answers  []junkAnswer
	start    chan struct{}
	wg       sync.WaitGroup
	released time.Time
}

// floodDeadline bounds each junk request, from the release.
const floodDeadline = 60 * time.Second

func prepareFlood(tb testing.TB, c *cluster, reqs []junkRequest) *flood {
	tb.Helper()
	f := &flood{reqs: reqs, answers: make([]junkAnswer, len(reqs)), start: make(chan struct{})}
	conns := make([]net.Conn, len(reqs))
	err := ns.WithNetNSPath(sandbox.NetNSPath(c.s.Layout.NodeNetNS("node1")), func(ns.NetNS) error {
		for i := range conns {
			var err error
			if conns[i], err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", framework.NodeStreamAddress()); err != nil {
				return fmt.Errorf("connection %d of %d: %w", i+1, len(conns), err)
			}
		}
		return nil
	})
	if err != nil {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
		tb.Fatalf("dial the stream port from node1: %v", err)
	}
	tlsConfig := &tls.Config{RootCAs: c.ca, ServerName: stream.DefaultServerName, NextProtos: []string{"http/1.1"}}
	for i := range reqs {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer conns[i].Close()
			<-f.start
			f.answers[i] = f.send(conns[i], tlsConfig, reqs[i])
		}()
	}
	return f
}

func (f *flood) release() {
	f.released = time.Now()
	close(f.start)
}

// send makes one junk request on conn.
func (f *flood) send(conn net.Conn, tlsConfig *tls.Config, r junkRequest) junkAnswer {
	ctx, cancel := context.WithDeadline(context.Background(), f.released.Add(floodDeadline))
	defer cancel()
	_ = conn.SetDeadline(f.released.Add(floodDeadline))
	answer := func(a junkAnswer) junkAnswer {
		a.at = time.Since(f.released)
		return a
	}
	tc := tls.Client(conn, tlsConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		return answer(junkAnswer{err: fmt.Errorf("TLS handshake: %w", err)})
	}
	shaken := time.Since(f.released)
	answer = func(a junkAnswer) junkAnswer {
		a.shaken, a.at = shaken, time.Since(f.released)
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+framework.NodeStreamAddress()+stream.PolicyPath(r.node), nil)
	if err != nil {
		return answer(junkAnswer{err: err})
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	req.Close = true
	if err := req.Write(tc); err != nil {
		return answer(junkAnswer{err: fmt.Errorf("write the request: %w", err)})
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		return answer(junkAnswer{err: fmt.Errorf("read the answer: %w", err)})
	}
	resp.Body.Close()
	return answer(junkAnswer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")})
}

// floodResult sums up the answers.
type floodResult struct {
	// codes counts the answers per kind and status code.
	codes [junkKinds]map[int]int
	// busyWithoutRetryAfter counts 503 answers without a Retry-After header.
	busyWithoutRetryAfter int
	errs                  []error
	// slowest is, per kind, the longest time to an answer since the release; shaken
	// when the last TLS handshake ended.
	slowest [junkKinds]time.Duration
	shaken  time.Duration
}

// wait waits for every answer.
func (f *flood) wait() floodResult {
	f.wg.Wait()
	var res floodResult
	for k := range res.codes {
		res.codes[k] = map[int]int{}
	}
	for i, a := range f.answers {
		res.slowest[f.reqs[i].kind] = max(res.slowest[f.reqs[i].kind], a.at)
		res.shaken = max(res.shaken, a.shaken)
		if a.err != nil {
			res.errs = append(res.errs, fmt.Errorf("%s request %d: %w", f.reqs[i].kind, i, a.err))
			continue
		}
		res.codes[f.reqs[i].kind][a.code]++
		if a.code == http.StatusServiceUnavailable && a.retryAfter == "" {
			res.busyWithoutRetryAfter++
		}
	}
	return res
}

func (r floodResult) String() string {
	var b strings.Builder
	for k, codes := range r.codes {
		fmt.Fprintf(&b, "%s: %v, the last after %s; ", junkKind(k), codes, ms(r.slowest[k]))
	}
	fmt.Fprintf(&b, "%d errors; the last TLS handshake done after %s", len(r.errs), ms(r.shaken))
	return b.String()
}
