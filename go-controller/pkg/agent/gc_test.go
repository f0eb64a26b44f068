package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// TestGCKeepsRunningPodsPorts (issue 14): a CNI GC with an empty valid list, which any
// local root process can send, removes the port of a pod that is gone, but not the port
// of a pod the API shows running on this node; the refusal names it.
func TestGCKeepsRunningPodsPorts(t *testing.T) {
	r := newAttachRig(t, time.Second)
	ctx := context.Background()
	running, gone := attachOf("a", 10), attachOf("gone", 20)
	for _, req := range []cni.AttachRequest{running, gone} {
		if _, err := r.ports.store.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: req.HostIfName, ExternalIDs: portIDs(req)}); err != nil {
			t.Fatal(err)
		}
	}
	r.ports.pods = podsOnNode(t, "a") // x/gone is not in the API
	err := r.ports.GC(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "x/a") {
		t.Errorf("GC with an empty list = %v, want a refusal naming x/a", err)
	}
	ports, err := r.ports.store.Ports(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ports {
		names = append(names, p.Name)
	}
	if !slices.Contains(names, running.HostIfName) || slices.Contains(names, gone.HostIfName) {
		t.Errorf("ports after GC: %v; want %s (running pod) kept and %s (gone) removed", names, running.HostIfName, gone.HostIfName)
	}
}
