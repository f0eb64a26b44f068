package stream

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// notifyingSink records what the client said of the controller's version.
type notifyingSink struct {
	*recordingSink
	mu       sync.Mutex
	verdicts []error
}

func (s *notifyingSink) ControllerCompatible(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdicts = append(s.verdicts, err)
}

func (s *notifyingSink) seen() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.verdicts...)
}

// withoutVersion serves h as a controller before the protocol header did: the header is
// removed from every response.
type withoutVersion struct{ h http.Handler }

func (o withoutVersion) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.h.ServeHTTP(stripVersion{w}, r)
}

type stripVersion struct{ http.ResponseWriter }

func (s stripVersion) WriteHeader(code int) {
	s.Header().Del(ProtocolHeader)
	s.ResponseWriter.WriteHeader(code)
}

func (s stripVersion) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// A controller that names no protocol version (the releases before node-local pod
// addresses) is refused before anything it streams reaches the sink, and the sink is told
// why; this release's controller is taken.
func TestClientRefusesAnOlderController(t *testing.T) {
	src := newFakeSource()
	src.change(t, "node1", addAddressSet("a", "10.0.0.1/32"))
	pki := newTestPKI(t)
	srv := NewServer(ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser},
		KeepaliveInterval: 50 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := &http.Server{Handler: withoutVersion{srv.Handler()}, TLSConfig: pki.server}
	go func() { _ = old.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = old.Close() })
	ts := &testServer{t: t, pki: pki, addr: ln.Addr().String()}
	sink := &notifyingSink{recordingSink: newRecordingSink()}
	runClient(t, ts, "node1", "agent-node1", sink)
	// Two refusals (the first connection ended without the sink taking anything), or a
	// snapshot taken: either settles it.
	eventually(t, "two verdicts on the controller, or a snapshot taken", func() error {
		if len(sink.seen()) < 2 && len(sink.log()) == 0 {
			return errors.New("neither")
		}
		return nil
	})
	if got := sink.log(); len(got) != 0 {
		t.Fatalf("the sink took %q from a controller that names no protocol version", got)
	}
	for _, err := range sink.seen() {
		var tooOld *ControllerTooOldError
		if !errors.As(err, &tooOld) || tooOld.Version != 1 {
			t.Fatalf("verdict %v, want a ControllerTooOldError of version 1", err)
		}
	}

	// This release's server, on another address, is taken.
	ts = agentServer(t, src, nil)
	sink = &notifyingSink{recordingSink: newRecordingSink()}
	runClient(t, ts, "node1", "agent-node1", sink)
	sink.waitShare(t, src.share("node1"))
	if v := sink.seen(); len(v) == 0 || v[0] != nil {
		t.Errorf("verdicts %v, want nil (compatible) first", v)
	}
}

var _ policy.Sink = (*notifyingSink)(nil)
