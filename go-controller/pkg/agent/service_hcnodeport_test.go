package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// freePort is a TCP port nothing listens on right now, on both families.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// hcAnswer is one answer of a health check node port.
type hcAnswer struct {
	code   int
	weight string
	body   map[string]any
	raw    string
	err    error
}

func askHealthCheck(addr string) hcAnswer {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return hcAnswer{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return hcAnswer{err: err}
	}
	a := hcAnswer{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), raw: string(raw)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		a.err = errors.New("Content-Type " + ct)
	} else if err := json.Unmarshal(raw, &a.body); err != nil {
		a.err = err
	}
	return a
}

// waitHealthCheck asks addr until ok holds for the answer (the proxy applies informer
// events on its own goroutine) or 10 s pass; it returns the last answer.
func waitHealthCheck(t *testing.T, addr string, ok func(hcAnswer) bool) hcAnswer {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := askHealthCheck(addr)
		if ok(a) || time.Now().After(deadline) {
			return a
		}
		time.Sleep(50 * time.Millisecond) // a poll interval: each round asks the server again
	}
}

// TestHealthCheckNodePortFollowsLocalEndpoints: a LoadBalancer Service with
// externalTrafficPolicy Local gets kube-proxy's health check server on its
// healthCheckNodePort: 200 with the count of the node's ready endpoints (header and JSON
// body), 503 once none is ready (a terminating endpoint still serving counts not), and
// nothing listens once the Service goes to externalTrafficPolicy Cluster.
func TestHealthCheckNodePortFollowsLocalEndpoints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freePort(t)
	svc := testService("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = int32(port)
		s.Spec.Ports[0].NodePort = 30080
	})
	local := sliceEP{"10.244.1.10", "node-1", true, true, false}
	remote := sliceEP{"10.244.2.10", "node-2", true, true, false}
	slice := testSlice("lb", "lb-1", discoveryv1.AddressTypeIPv4, 8080, local, remote)
	client := fake.NewSimpleClientset(svc, slice)
	factory := newServiceInformers(client)
	state := NewNodeState(1, nil)
	proxy, err := NewServiceProxy("node-1", state, factory)
	if err != nil {
		t.Fatal(err)
	}
	proxy.checks = newHealthCheckServer(ctx, proxy.serviceRulesInSync)
	factory.Start(ctx.Done())
	if err := proxy.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))

	a := askHealthCheck(addr)
	if a.err != nil || a.code != http.StatusOK || a.weight != "1" {
		t.Fatalf("one local ready endpoint: %d, weight %q, %v, want 200 and 1 (body %q)", a.code, a.weight, a.err, a.raw)
	}
	want := `{
	"service": {
		"namespace": "x",
		"name": "lb"
	},
	"localEndpoints": 1,
	"serviceProxyHealthy": true
}`
	if a.raw != want {
		t.Errorf("body %q, want kube-proxy's %q", a.raw, want)
	}

	// An IPv6 address of the node: no IPv6 endpoint.
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		a := askHealthCheck(net.JoinHostPort("::1", strconv.Itoa(int(port))))
		if a.err != nil || a.code != http.StatusServiceUnavailable || a.weight != "0" {
			t.Errorf("over IPv6: %d, weight %q, %v, want 503 and 0 (body %q)", a.code, a.weight, a.err, a.raw)
		}
	}

	// The local endpoint terminates (still serving): the node fails its health check.
	local.ready, local.terminating = false, true
	slice = testSlice("lb", "lb-1", discoveryv1.AddressTypeIPv4, 8080, local, remote)
	if _, err := client.DiscoveryV1().EndpointSlices("x").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a = waitHealthCheck(t, addr, func(a hcAnswer) bool { return a.code == http.StatusServiceUnavailable })
	if a.err != nil || a.code != http.StatusServiceUnavailable || a.weight != "0" || a.body["localEndpoints"] != 0.0 {
		t.Errorf("only a terminating local endpoint: %d, weight %q, %v, want 503, 0 (body %q)", a.code, a.weight, a.err, a.raw)
	}

	// externalTrafficPolicy Cluster: no health check node port.
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	if _, err := client.CoreV1().Services("x").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a = waitHealthCheck(t, addr, func(a hcAnswer) bool { return errors.Is(a.err, syscall.ECONNREFUSED) })
	if !errors.Is(a.err, syscall.ECONNREFUSED) {
		t.Errorf("externalTrafficPolicy Cluster: the port answers %d %q (%v), want the connection refused", a.code, a.raw, a.err)
	}
}

// TestHealthCheckCountsPerFamily: the count is of the node's ready endpoint addresses of
// the request's family, each address once whatever its ports, as kube-proxy's per-family
// servers count; other Services' types and policies have no health check.
func TestHealthCheckCountsPerFamily(t *testing.T) {
	svc := testService("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 32000
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::10"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 81, Protocol: corev1.ProtocolTCP})
	})
	v4 := testSlice("lb", "v4", discoveryv1.AddressTypeIPv4, 8080,
		sliceEP{"10.244.1.10", "node-1", true, true, false}, sliceEP{"10.244.1.11", "node-1", false, false, false},
		sliceEP{"10.244.2.10", "node-2", true, true, false})
	v4alt := testSlice("lb", "v4alt", discoveryv1.AddressTypeIPv4, 8081, sliceEP{"10.244.1.10", "node-1", true, true, false})
	v4alt.Ports[0].Name = &svc.Spec.Ports[1].Name
	v6 := testSlice("lb", "v6", discoveryv1.AddressTypeIPv6, 8080,
		sliceEP{"fd00:10:244:1::10", "node-1", true, true, false}, sliceEP{"fd00:10:244:1::11", "node-1", true, true, false})
	hc, ok := healthCheckOf(svc, []*discoveryv1.EndpointSlice{v4, v4alt, v6}, "node-1")
	if !ok || hc.port != 32000 || hc.local != [2]int{1, 2} {
		t.Errorf("health check %+v %v, want port 32000, 1 IPv4 and 2 IPv6 local ready endpoints", hc, ok)
	}
	for name, mutate := range map[string]func(*corev1.Service){
		"NodePort":                      func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
		"externalTrafficPolicy Cluster": func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster },
		"no port":                       func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 0 },
	} {
		other := svc.DeepCopy()
		mutate(other)
		if hc, ok := healthCheckOf(other, []*discoveryv1.EndpointSlice{v4}, "node-1"); ok {
			t.Errorf("%s: health check %+v, want none", name, hc)
		}
	}
}
