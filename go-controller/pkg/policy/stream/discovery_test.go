package stream

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func slice(name, service string, port int32, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(StreamPortName), Port: ptr.To(port)}, {Name: ptr.To("other"), Port: ptr.To(int32(1))}},
		Endpoints:   endpoints,
	}
}

func endpoint(addr string, ready *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

func TestParseServiceAddress(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ns, name string
		ok, err  bool
	}{
		{in: "10.0.0.1:9443"},
		{in: "service:kube-system/kovs-controller", ns: "kube-system", name: "kovs-controller", ok: true},
		{in: "service:kovs-controller", ok: true, err: true},
		{in: "service:a/b/c", ok: true, err: true},
		{in: "service:/b", ok: true, err: true},
	} {
		ns, name, ok, err := ParseServiceAddress(tc.in)
		if ns != tc.ns || name != tc.name || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%q: got %q %q %v %v", tc.in, ns, name, ok, err)
		}
		if err != nil && !strings.Contains(err.Error(), "service:NAMESPACE/NAME") {
			t.Errorf("%q: error %q does not say the expected form", tc.in, err)
		}
	}
}

func TestServiceDialerDialsReadyEndpointsOfTheNamedPort(t *testing.T) {
	client := fake.NewSimpleClientset(
		slice("ctl-a", "kovs-controller", 9443, endpoint("10.0.0.1", ptr.To(false)), endpoint("10.0.0.2", nil)),
		slice("ctl-b", "kovs-controller", 9443, endpoint("10.0.0.3", ptr.To(true))),
		slice("other", "something-else", 9443, endpoint("10.9.9.9", ptr.To(true))),
	)
	var tried []string
	dial := ServiceDialer(client, "kube-system", "kovs-controller", StreamPortName, nil, func(_ context.Context, _, addr string) (net.Conn, error) {
		tried = append(tried, addr)
		return nil, errors.New("refused")
	})
	if _, err := dial(context.Background(), "tcp", "ignored:1"); err == nil {
		t.Fatal("dial succeeded although every endpoint refused")
	}
	want := []string{"10.0.0.2:9443", "10.0.0.3:9443"}
	if !reflect.DeepEqual(tried, want) {
		t.Fatalf("dialed %v, want the ready endpoints %v", tried, want)
	}

	tried = nil
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	dial = ServiceDialer(client, "kube-system", "kovs-controller", StreamPortName, nil, func(_ context.Context, _, addr string) (net.Conn, error) {
		tried = append(tried, addr)
		if addr == "10.0.0.3:9443" {
			return c1, nil
		}
		return nil, errors.New("refused")
	})
	if c, err := dial(context.Background(), "tcp", "ignored:1"); err != nil || c != c1 {
		t.Fatalf("dial = %v, %v; want the connection to the second ready endpoint", c, err)
	}
}

func TestServiceDialerWithoutEndpointsSaysWhy(t *testing.T) {
	client := fake.NewSimpleClientset(slice("ctl", "kovs-controller", 9443, endpoint("10.0.0.1", ptr.To(false))))
	dial := ServiceDialer(client, "kube-system", "kovs-controller", StreamPortName, nil, func(context.Context, string, string) (net.Conn, error) {
		t.Fatal("dialed although no endpoint is ready")
		return nil, nil
	})
	_, err := dial(context.Background(), "tcp", "x:1")
	if err == nil || !strings.Contains(err.Error(), "no ready endpoint of Service kube-system/kovs-controller") {
		t.Fatalf("err = %v", err)
	}
}

func podEndpoint(addr, pod string) discoveryv1.Endpoint {
	e := endpoint(addr, ptr.To(true))
	e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: pod}
	return e
}

// A hung leader's pod stays a ready, labelled endpoint until its readiness probe fails:
// the dialer tries the pod the Lease names first, whatever the slices' order.
func TestServiceDialerDialsTheLeadersPodFirst(t *testing.T) {
	client := fake.NewSimpleClientset(slice("ctl", "kovs-controller", 9443,
		podEndpoint("10.0.0.1", "kovs-controller-a"), podEndpoint("10.0.0.2", "kovs-controller-b"), endpoint("10.0.0.3", nil)))
	for _, tc := range []struct {
		leader string
		want   []string
	}{
		{"kovs-controller-b", []string{"10.0.0.2:9443", "10.0.0.1:9443", "10.0.0.3:9443"}},
		{"kovs-controller-a", []string{"10.0.0.1:9443", "10.0.0.2:9443", "10.0.0.3:9443"}},
		{"", []string{"10.0.0.1:9443", "10.0.0.2:9443", "10.0.0.3:9443"}},
		{"gone", []string{"10.0.0.1:9443", "10.0.0.2:9443", "10.0.0.3:9443"}},
	} {
		var tried []string
		dial := ServiceDialer(client, "kube-system", "kovs-controller", StreamPortName, func() string { return tc.leader },
			func(_ context.Context, _, addr string) (net.Conn, error) {
				tried = append(tried, addr)
				return nil, errors.New("refused")
			})
		_, _ = dial(context.Background(), "tcp", "x:1")
		if !reflect.DeepEqual(tried, tc.want) {
			t.Errorf("leader %q: dialed %v, want %v", tc.leader, tried, tc.want)
		}
	}
}
