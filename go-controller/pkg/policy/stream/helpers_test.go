package stream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// testPKI is a CA and a serving certificate for DefaultServerName.
type testPKI struct {
	roots  *x509.CertPool
	server *tls.Config
}

func newTestPKI(t *testing.T, names ...string) testPKI {
	t.Helper()
	if len(names) == 0 {
		names = []string{DefaultServerName}
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kovs-controller"}, DNSNames: names,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return testPKI{roots: roots, server: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}
}

// fakeSource is a policy source whose shares the test changes one delta at a time.
type fakeSource struct {
	mu     sync.Mutex
	gen    uint64
	shares map[string]*policy.NodeShare
	subs   map[string]map[chan policy.Delta]struct{}
	// watches counts Watch calls per node.
	watches map[string]int
}

// waitUnsubscribed waits until node's streams have all closed.
func (f *fakeSource) waitUnsubscribed(t *testing.T, node string) {
	t.Helper()
	eventually(t, "the stream to close", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if n := len(f.subs[node]); n > 0 {
			return fmt.Errorf("%d subscriptions open", n)
		}
		return nil
	})
}

func newFakeSource() *fakeSource {
	return &fakeSource{gen: 1, shares: map[string]*policy.NodeShare{}, subs: map[string]map[chan policy.Delta]struct{}{},
		watches: map[string]int{}}
}

func (f *fakeSource) shareLocked(node string) *policy.NodeShare {
	s, ok := f.shares[node]
	if !ok {
		n := policy.NewNodeShare(node)
		n.Generation = f.gen
		s = &n
		f.shares[node] = s
	}
	return s
}

func (f *fakeSource) Watch(ctx context.Context, node string) (policy.NodeShare, <-chan policy.Delta, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches[node]++
	ch := make(chan policy.Delta, 1000)
	if f.subs[node] == nil {
		f.subs[node] = map[chan policy.Delta]struct{}{}
	}
	f.subs[node][ch] = struct{}{}
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.subs[node], ch)
			close(ch)
		})
	}
	return clone(*f.shareLocked(node)), ch, cancel, nil
}

// change applies a delta built by fill to node's share and sends it to the subscribers.
func (f *fakeSource) change(t *testing.T, node string, fill func(d *policy.Delta)) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shareLocked(node)
	f.gen++
	d := policy.Delta{Node: node, FromGeneration: s.Generation, Generation: f.gen}
	fill(&d)
	if err := d.Apply(s); err != nil {
		t.Fatal(err)
	}
	for ch := range f.subs[node] {
		ch <- clone(d)
	}
}

func (f *fakeSource) share(node string) policy.NodeShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	return clone(*f.shareLocked(node))
}

func (f *fakeSource) watchCount(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[node]
}

// addAddressSet is a change that adds an address set holding one address.
func addAddressSet(id, addr string) func(*policy.Delta) {
	return func(d *policy.Delta) {
		d.AddedAddressSets = append(d.AddedAddressSets, policy.AddressSet{ID: id,
			Addresses: []netip.Prefix{netip.MustParsePrefix(addr)}})
	}
}

func clone[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// recordingSink is an agent stand-in: it applies what it gets, records the order, and
// realizes everything at once.
type recordingSink struct {
	mu       sync.Mutex
	share    policy.NodeShare
	have     bool
	events   []string
	failNext error
	realized uint64
	changed  chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{changed: make(chan struct{}, 1)} }

func (s *recordingSink) Snapshot(share policy.NodeShare) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.share, s.have = clone(share), true
	s.events = append(s.events, fmt.Sprintf("snapshot %d", share.Generation))
	s.realized = share.Generation
	s.signal()
	return nil
}

func (s *recordingSink) Delta(d policy.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failNext; err != nil {
		s.failNext = nil
		s.events = append(s.events, fmt.Sprintf("refused %d->%d", d.FromGeneration, d.Generation))
		return err
	}
	if err := d.Apply(&s.share); err != nil {
		return err
	}
	s.events = append(s.events, fmt.Sprintf("delta %d->%d", d.FromGeneration, d.Generation))
	s.realized = d.Generation
	s.signal()
	return nil
}

func (s *recordingSink) Realized() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.realized
}

func (s *recordingSink) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *recordingSink) failNextDelta(err error) {
	s.mu.Lock()
	s.failNext = err
	s.mu.Unlock()
}

func (s *recordingSink) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

// waitShare waits until the sink holds want.
func (s *recordingSink) waitShare(t *testing.T, want policy.NodeShare) {
	t.Helper()
	eventually(t, "the sink to hold the source's share", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.have {
			return errors.New("no snapshot yet")
		}
		if !reflect.DeepEqual(clone(s.share), want) {
			return fmt.Errorf("sink at generation %d, source at %d", s.share.Generation, want.Generation)
		}
		return nil
	})
}

// fakeAuth knows tokens by value.
type fakeAuth map[string]Identity

func (a fakeAuth) Authenticate(_ context.Context, token string) (Identity, error) {
	id, ok := a[token]
	if !ok {
		return Identity{}, fmt.Errorf("unknown token: %w", ErrUnauthenticated)
	}
	return id, nil
}

const agentUser = "system:serviceaccount:kube-system:kovs-agent"

var testTokens = fakeAuth{
	"agent-node1":  {User: agentUser, Node: "node1"},
	"agent-node2":  {User: agentUser, Node: "node2"},
	"agent-nobind": {User: agentUser},
	"other-node1":  {User: "system:serviceaccount:default:default", Node: "node1"},
}

// reports records realized generations.
type reports struct {
	mu  sync.Mutex
	got map[string]uint64
}

func (r *reports) Realized(node string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]uint64{}
	}
	r.got[node] = gen
}

func (r *reports) of(node string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[node]
}

// testServer runs a Server on a loopback port; restart serves again on the same port.
type testServer struct {
	t       *testing.T
	srv     *Server
	pki     testPKI
	addr    string
	stop    context.CancelFunc
	stopped chan struct{}
}

func startServer(t *testing.T, cfg ServerConfig, pki testPKI) *testServer {
	t.Helper()
	ts := &testServer{t: t, pki: pki, srv: NewServer(cfg)}
	ts.serve("127.0.0.1:0")
	t.Cleanup(ts.shutdown)
	return ts
}

func (ts *testServer) serve(addr string) {
	ts.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after a restart
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ts.stop, ts.stopped = cancel, make(chan struct{})
	go func() {
		defer close(ts.stopped)
		if err := ts.srv.Serve(ctx, ln, ts.pki.server); err != nil {
			ts.t.Errorf("serve: %v", err)
		}
	}()
}

func (ts *testServer) shutdown() {
	ts.stop()
	<-ts.stopped
}

// restart stops the server and starts a new one, with the same configuration, on the same
// address, after between runs.
func (ts *testServer) restart(between func()) {
	ts.shutdown()
	between()
	ts.srv = NewServer(ts.srv.cfg)
	ts.serve(ts.addr)
}

// runClient runs a client for node with token until the test ends.
func runClient(t *testing.T, ts *testServer, node, token string, sink policy.Sink) {
	t.Helper()
	runClientWith(t, ClientConfig{Node: node, Address: ts.addr, Token: func() (string, error) { return token, nil },
		RootCAs:    func(context.Context) (*x509.CertPool, error) { return ts.pki.roots, nil },
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ReportPoll: 20 * time.Millisecond}, sink)
}

// runClientWith runs a client of cfg until the test ends.
func runClientWith(t *testing.T, cfg ClientConfig, sink policy.Sink) {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, sink)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func TestMain(m *testing.M) {
	// The client and server log every refusal and reconnect; tests provoke many.
	flag.Parse()
	if !testing.Verbose() {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
