package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// cutMode says what a cuttingProxy does with the next transaction it sees.
type cutMode int

const (
	// cutBefore closes the connection instead of passing the transaction on:
	// the server never sees it.
	cutBefore cutMode = iota + 1
	// cutAfterCommit passes the transaction on, drops everything the server
	// answers, and closes the connection once the server has had time to
	// commit: the client never learns that it did.
	cutAfterCommit
)

// cuttingProxy sits between an OVSDB client and ovsdb-server on a unix
// socket of its own and, once armed, cuts the connection that carries the
// next "transact" request. That is the loss the timing of a real restart can
// only hit by chance: a transaction under way when the connection drops.
type cuttingProxy struct {
	t        *testing.T
	listener net.Listener
	upstream string

	mu    sync.Mutex
	armed cutMode
	cuts  int
}

func startCuttingProxy(t *testing.T, rig *ovstest.Rig) *cuttingProxy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db-proxy.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{t: t, listener: l, upstream: rig.DBSocket}
	t.Cleanup(func() { l.Close() })
	go p.serve()
	return p
}

func (p *cuttingProxy) endpoint() string { return "unix:" + p.listener.Addr().String() }

func (p *cuttingProxy) arm(m cutMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = m
}

func (p *cuttingProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// take returns the armed mode if chunk carries a transaction, and disarms.
func (p *cuttingProxy) take(chunk []byte) cutMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == 0 || !bytes.Contains(chunk, []byte(`"transact"`)) {
		return 0
	}
	m := p.armed
	p.armed = 0
	p.cuts++
	return m
}

func (p *cuttingProxy) serve() {
	for {
		down, err := p.listener.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("unix", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		go p.relay(down, up)
	}
}

func (p *cuttingProxy) relay(down, up net.Conn) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { down.Close(); up.Close() }) }
	defer closeBoth()
	var mu sync.Mutex
	dropReplies := false
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				mu.Lock()
				drop := dropReplies
				mu.Unlock()
				if !drop {
					if _, werr := down.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := down.Read(buf)
		if n > 0 {
			switch p.take(buf[:n]) {
			case cutBefore:
				return
			case cutAfterCommit:
				mu.Lock()
				dropReplies = true
				mu.Unlock()
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
				return
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.t.Logf("proxy: %v", err)
			}
			return
		}
	}
}

// TestWriteSurvivesACutTransaction cuts the connection under a write, before
// the server saw the transaction and after it committed it: either way the
// write waits for the reconnection and succeeds, and the port exists once.
func TestWriteSurvivesACutTransaction(t *testing.T) {
	rig := ovstest.Start(t)
	proxy := startCuttingProxy(t, rig)
	ctx := testContext(t)
	log := logrus.New()
	log.SetLevel(logrus.InfoLevel)
	db, err := ovs.NewOVSDB(ctx, proxy.endpoint(), ovs.WithLogger(logrus.NewEntry(log).WithField("test", t.Name())))
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(db.Close)
	if err := db.EnsureBridge(ctx, brIntSpec()); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		mode cutMode
		spec ovs.PortSpec
	}{
		{"cut before the server saw it", cutBefore, gatewaySpec()},
		{"cut after the server committed it", cutAfterCommit, tunnelSpec()},
	} {
		before := proxy.cutCount()
		proxy.arm(tc.mode)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		ofport, err := db.EnsurePort(wctx, "br-int", tc.spec)
		cancel()
		if proxy.cutCount() != before+1 {
			t.Fatalf("%s: the proxy cut %d connections, want 1: the test did not cut the write", tc.name, proxy.cutCount()-before)
		}
		if err != nil {
			t.Fatalf("%s: EnsurePort %s: %v", tc.name, tc.spec.Name, err)
		}
		if ofport != tc.spec.OfportRequest {
			t.Errorf("%s: port %s at ofport %d, want %d", tc.name, tc.spec.Name, ofport, tc.spec.OfportRequest)
		}
		if got := strings.Fields(rig.Vsctl(t, "--bare", "--columns=name", "find", "Port", "name="+tc.spec.Name)); len(got) != 1 {
			t.Errorf("%s: ports named %s: %q, want one", tc.name, tc.spec.Name, got)
		}
	}

	// The other writes take the same path: a cut delete and a cut
	// Open_vSwitch mutation.
	proxy.arm(cutBefore)
	if err := db.DeletePort(ctx, "br-int", tunnelSpec().Name); err != nil {
		t.Fatalf("DeletePort across a cut: %v", err)
	}
	proxy.arm(cutAfterCommit)
	if err := db.SetExternalIDs(ctx, map[string]string{"kovs-cut-test": "1"}); err != nil {
		t.Fatalf("SetExternalIDs across a cut: %v", err)
	}
	if proxy.cutCount() != 4 {
		t.Fatalf("the proxy cut %d connections in all, want 4", proxy.cutCount())
	}
	if got := rig.Vsctl(t, "--bare", "--columns=name", "find", "Port", "name="+tunnelSpec().Name); got != "" {
		t.Errorf("port %s still there after DeletePort: %q", tunnelSpec().Name, got)
	}
	if got := rig.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids:kovs-cut-test"); got != `"1"` {
		t.Errorf("external_ids:kovs-cut-test = %s, want \"1\"", got)
	}
}
