package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// portHook is a store whose EnsurePort runs before first.
type portHook struct {
	ovs.Store
	before func(ctx context.Context, spec ovs.PortSpec) error
}

func (h portHook) EnsurePort(ctx context.Context, bridge string, spec ovs.PortSpec) (int, error) {
	if err := h.before(ctx, spec); err != nil {
		return 0, err
	}
	return h.Store.EnsurePort(ctx, bridge, spec)
}

// podFlowsOf reports whether the switch has flows of the local pod with ofport.
func (r *attachRig) podFlowsOf(ofport uint32) bool {
	for _, e := range r.sw.Flows() {
		if c := pipeline.Cookie(e.Cookie); c.Category() == pipeline.CategoryPod && c.Object() == ofport {
			return true
		}
	}
	return false
}

// TestAttachInstallsFlowsWhileThePortIsAdded: the pod's flows, under the number its port
// asks for, are installed while ovs-vswitchd adds the port (here: EnsurePort does not
// return until they are), and the port gets that number.
func TestAttachInstallsFlowsWhileThePortIsAdded(t *testing.T) {
	r := newAttachRig(t, 10*time.Second)
	r.state.mu.Lock()
	r.state.policy = nil // no policy wait: this test is about the port and the pod's flows
	r.state.mu.Unlock()
	r.ports.store = portHook{Store: r.ports.store, before: func(ctx context.Context, spec ovs.PortSpec) error {
		if spec.Name != "veth-c" {
			return nil
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			pod, ok := r.state.Pods()["veth-c"]
			if ok && spec.OfportRequest > 0 && pod.OFPort == uint32(spec.OfportRequest) && r.podFlowsOf(pod.OFPort) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no flows of the pod under the requested ofport %d while its port was added", spec.OfportRequest)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.ports.Attach(ctx, attachC()); err != nil {
		t.Fatal(err)
	}
	ports, err := r.ports.store.FindPorts(ctx, "br-int", extSandbox, "sandbox-c")
	if err != nil || len(ports) != 1 {
		t.Fatalf("ports of sandbox-c: %v (%v)", ports, err)
	}
	if got := r.state.Pods()["veth-c"].OFPort; int(got) != ports[0].Ofport || got != 5 {
		t.Errorf("the pod's flows are for ofport %d, its port has %d; want 5, the first number no port held", got, ports[0].Ofport)
	}
}

// TestAttachUndoneWhenThePortGetsAnotherNumber: a port added behind kovs's back takes the
// number the pod's port asked for; CNI ADD fails saying so, and leaves neither the pod's
// flows (which named the other port's number), nor its meter, nor its port.
func TestAttachUndoneWhenThePortGetsAnotherNumber(t *testing.T) {
	r := newAttachRig(t, 10*time.Second)
	r.ports.meters = r.sw
	pod, err := r.ports.pods.Pods("x").Get("c")
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[bandwidth.IngressAnnotation] = "10M" // the lister's own object: the agent reads it
	inner := r.ports.store
	var taken int
	r.ports.store = portHook{Store: inner, before: func(ctx context.Context, spec ovs.PortSpec) error {
		if spec.Name != "veth-c" {
			return nil
		}
		taken = spec.OfportRequest
		_, err := inner.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: "intruder", OfportRequest: spec.OfportRequest})
		return err
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = r.ports.Attach(ctx, attachC())
	if err == nil || !strings.Contains(err.Error(), "not the requested") {
		t.Fatalf("Attach error = %v, want one saying the port did not get the number it asked for", err)
	}
	if taken <= 0 {
		t.Fatalf("the port asked for ofport %d, want a number", taken)
	}
	if _, ok := r.state.Pods()["veth-c"]; ok {
		t.Error("the failed pod is still in the desired state")
	}
	if r.podFlowsOf(uint32(taken)) {
		t.Errorf("pod flows for ofport %d, now the intruder's, are still installed", taken)
	}
	meters, err := r.sw.DumpMeters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(meters) != 0 {
		t.Errorf("meters %v left after the failed attach, want none", meters)
	}
	ports, err := inner.Ports(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ports {
		names = append(names, fmt.Sprintf("%s=%d", p.Name, p.Ofport))
	}
	if got := strings.Join(names, " "); got != fmt.Sprintf("br-int=65534 gateway=2 intruder=%d tunnel=1 veth-a=3 veth-b=4", taken) {
		t.Errorf("ports after the failed attach: %s, want the pod's gone and the intruder's kept", got)
	}
}

// TestRequestOFPort: a repeated ADD keeps its port's number; otherwise the next number
// after the last one asked for that no port and no pod of the state holds, wrapping at the
// highest port number.
func TestRequestOFPort(t *testing.T) {
	r := newAttachRig(t, time.Second)
	ctx := context.Background()
	p := r.ports
	if n, err := p.requestOFPort(ctx, "veth-a"); err != nil || n != 3 {
		t.Errorf("veth-a, on br-int at 3: %d (%v), want 3", n, err)
	}
	if n, err := p.requestOFPort(ctx, "veth-c"); err != nil || n != 5 {
		t.Errorf("first new port: %d (%v), want 5 (1-4 are held)", n, err)
	}
	if n, err := p.requestOFPort(ctx, "veth-c"); err != nil || n != 6 {
		t.Errorf("next new port: %d (%v), want 6, not 5 again", n, err)
	}
	p.state.SetPod("veth-gone", testPod("gone", 7, 13)) // in the state, port not yet on br-int
	if n, err := p.requestOFPort(ctx, "veth-c"); err != nil || n != 8 {
		t.Errorf("with 7 a pod's: %d (%v), want 8", n, err)
	}
	p.lastOFPort = lastPodOFPort
	if n, err := p.requestOFPort(ctx, "veth-c"); err != nil || n != 5 {
		t.Errorf("after the highest number: %d (%v), want 5 (wrapped past the held 3 and 4)", n, err)
	}
}
