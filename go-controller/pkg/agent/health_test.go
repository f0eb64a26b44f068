package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

// healthRig is an agent whose parts are a policy rig's, started as far as the test says.
func healthRig(t *testing.T) (*Agent, *policyRig) {
	t.Helper()
	r := newPolicyRig(t, localPods()...)
	a := &Agent{cfg: Config{NodeName: "node-1", Bridge: "br-int", OVSDB: "unix:db.sock", CNISocket: "cni.sock",
		ResyncPeriod: 10 * time.Second, PolicyFeed: &fakeFeed{}}}
	return a, r
}

func failing(checks []nodestatus.Check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

func TestReadinessFollowsStartup(t *testing.T) {
	a, r := healthRig(t)
	if got := failing(a.readinessChecks()); strings.Join(got, ",") != "ovs,bridge,flows,cni-server,policy-feed" {
		t.Fatalf("failing checks of an agent not started = %v", got)
	}
	connected := true
	a.health.setOVS(struct{ connectedFunc }{func() bool { return connected }})
	a.health.attach(r.state, r.syncer, r.sink)
	r.sync(t, true)
	a.health.programmed.Store(true)
	a.health.cniServing.Store(true)
	if got := failing(a.readinessChecks()); strings.Join(got, ",") != "policy-feed" {
		t.Fatalf("failing checks before the first policy snapshot = %v", got)
	}
	if err := r.sink.Snapshot(startShare()); err != nil {
		t.Fatal(err)
	}
	feedUp := false
	a.health.feedConnected = func() bool { return feedUp }
	if got := failing(a.readinessChecks()); strings.Join(got, ",") != "policy-feed" {
		t.Fatalf("failing checks with the policy stream disconnected = %v", got)
	}
	feedUp = true
	if err := ready(a.readinessChecks()); err != nil {
		t.Fatalf("not ready with everything up: %v", err)
	}
	r.sw.FailNextBundle(errors.New("vswitchd gone"))
	r.state.SetPod("veth-new", testPod("new", 20, 20))
	r.syncer.sync(context.Background(), false)
	if got := failing(a.readinessChecks()); strings.Join(got, ",") != "flows" {
		t.Fatalf("failing checks after a failed sync = %v", got)
	}
	connected = false
	if got := failing(a.readinessChecks()); strings.Join(got, ",") != "ovs,flows" {
		t.Fatalf("failing checks with OVSDB lost = %v", got)
	}
}

type connectedFunc func() bool

func (f connectedFunc) Connected() bool { return f() }

func TestLivenessFailsWhenTheSyncerStopsSyncing(t *testing.T) {
	a, r := healthRig(t)
	now := time.Now()
	if err := a.liveness(now); err != nil {
		t.Fatalf("a starting agent is not alive: %v", err)
	}
	a.health.attach(r.state, r.syncer, r.sink)
	r.sync(t, true)
	a.health.programmed.Store(true)
	if err := a.liveness(time.Now()); err != nil {
		t.Fatalf("not alive right after a sync: %v", err)
	}
	if err := a.liveness(time.Now().Add(wedgedAfter(a.cfg.ResyncPeriod) + time.Second)); err == nil {
		t.Fatal("alive although no sync was attempted for longer than the wedge limit")
	}
}

func TestOpsEndpoints(t *testing.T) {
	a, r := healthRig(t)
	a.health.setOVS(nil)
	a.health.attach(r.state, r.syncer, r.sink)
	r.sync(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := a.serveOps(ctx, addr, nil); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[+]flows ok") || !strings.Contains(body, "[-]bridge failed") {
		t.Errorf("/readyz of an unprogrammed agent = %d:\n%s", code, body)
	}
	code, body = get("/status")
	var st nodestatus.Status
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/status = %d %v:\n%s", code, err, body)
	}
	if st.Node != "node-1" || st.Ready || st.Pods != len(localPods()) || st.Flows.Installed != len(r.sw.Flows()) ||
		st.Flows.InstalledGeneration != st.Flows.DesiredGeneration || st.Policy == nil || st.Policy.Received {
		t.Errorf("status = %+v", st)
	}
	if code, _ := get("/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without a registry = %d, want 404", code)
	}
}

// The attack: a pod reaches the node's addresses, and so the agent's port when the
// operator exposes /metrics beyond loopback. It gets /metrics only: /status, /healthz and
// /readyz (internal details: addresses, peers, checks) answer loopback clients only.
func TestOpsEndpointsBeyondLoopbackServeMetricsOnly(t *testing.T) {
	mux := http.NewServeMux()
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/status"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	}
	h := opsHandler(mux)
	for _, tc := range []struct {
		remote, path string
		want         int
	}{
		{"10.244.1.7:40000", "/status", http.StatusForbidden},
		{"10.244.1.7:40000", "/healthz", http.StatusForbidden},
		{"10.244.1.7:40000", "/readyz", http.StatusForbidden},
		{"[fd00:10:244::7]:40000", "/status", http.StatusForbidden},
		{"10.244.1.7:40000", "/metrics", http.StatusOK},
		{"127.0.0.1:40000", "/status", http.StatusOK},
		{"127.0.0.1:40000", "/readyz", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s from %s: %d, want %d", tc.path, tc.remote, w.Code, tc.want)
		}
	}
}
