package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// healthAt is a proxyHealth on a clock the test moves, with the switch at generation
// *installed.
func healthAt(now *time.Time, installed *uint64) *proxyHealth {
	h := newProxyHealth(DefaultProxyHealthTimeout, func() uint64 { return *installed })
	h.now = func() time.Time { return *now }
	return h
}

// get asks handler for path and returns the status and the decoded JSON body.
func get(t *testing.T, handler http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", path, ct)
	}
	return rec.Code, body
}

// TestProxyHealthFollowsChangesToTheSwitch: kube-proxy's semantics. Healthy while no
// change waits; a change that waits for the timeout, not yet handed to the state or
// handed but not installed, makes both URLs 503; its installation makes them 200 again.
func TestProxyHealthFollowsChangesToTheSwitch(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	installed := uint64(3)
	h := healthAt(&now, &installed)
	handler := proxyHealthHandler(h, func() *corev1.Node { return nil })
	want := func(step string, code int) {
		t.Helper()
		for _, path := range []string{"/healthz", "/livez"} {
			got, body := get(t, handler, path)
			if got != code {
				t.Errorf("%s: %s answers %d, want %d (%v)", step, path, got, code, body)
			}
			if _, ok := body["lastUpdated"]; !ok {
				t.Errorf("%s: %s body %v has no lastUpdated", step, path, body)
			}
		}
	}
	want("starting", http.StatusOK)

	h.queued()
	now = now.Add(DefaultProxyHealthTimeout - time.Second)
	want("a change queued for less than the timeout", http.StatusOK)
	now = now.Add(time.Second)
	want("a change queued for the timeout", http.StatusServiceUnavailable)

	h.handedTo(h.take(), 5)
	want("handed to generation 5, the switch holds 3", http.StatusServiceUnavailable)
	h.synced(4)
	want("the switch holds 4", http.StatusServiceUnavailable)
	h.synced(5)
	want("generation 5 installed", http.StatusOK)

	h.queued()
	installed = 6
	h.handedTo(h.take(), 6) // a change the switch held already (no flow changed)
	now = now.Add(2 * DefaultProxyHealthTimeout)
	want("a change already in the switch when handed over", http.StatusOK)
}

// TestProxyHealthzNodeEligible: /healthz fails for a node being deleted or tainted by the
// cluster autoscaler, /livez does not (kube-proxy's split).
func TestProxyHealthzNodeEligible(t *testing.T) {
	now, installed := time.Now(), uint64(0)
	h := healthAt(&now, &installed)
	for name, node := range map[string]*corev1.Node{
		"tainted":  {Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}}},
		"deleting": {ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: now}}},
	} {
		handler := proxyHealthHandler(h, func() *corev1.Node { return node })
		if code, body := get(t, handler, "/healthz"); code != http.StatusServiceUnavailable || body["nodeEligible"] != false {
			t.Errorf("%s node: /healthz %d %v, want 503 with nodeEligible false", name, code, body)
		}
		if code, body := get(t, handler, "/livez"); code != http.StatusOK {
			t.Errorf("%s node: /livez %d %v, want 200", name, code, body)
		}
	}
	handler := proxyHealthHandler(h, func() *corev1.Node { return &corev1.Node{} })
	if code, body := get(t, handler, "/healthz"); code != http.StatusOK || body["nodeEligible"] != true {
		t.Errorf("plain node: /healthz %d %v, want 200 with nodeEligible true", code, body)
	}
}

// TestProxyModeNamesKovs: kube-proxy's /proxyMode answers the proxy that programs the node.
func TestProxyModeNamesKovs(t *testing.T) {
	rec := httptest.NewRecorder()
	proxyModeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/proxyMode", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != ProxyMode {
		t.Errorf("/proxyMode: %d %q, want 200 %q", rec.Code, rec.Body.String(), ProxyMode)
	}
}
