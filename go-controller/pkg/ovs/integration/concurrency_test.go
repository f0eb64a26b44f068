package integration

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovstest"
)

// TestConcurrentEnsures runs EnsureBridge and EnsurePort from two clients at
// once, as overlapping agent and CNI calls do: the same bridge and port from
// several callers (one creates, the others must then update, not fail) and
// distinct ports side by side.
func TestConcurrentEnsures(t *testing.T) {
	rig := ovstest.Start(t)
	ctx := testContext(t)
	clients := []*ovs.OVSDB{connect(t, ctx, rig), connect(t, ctx, rig)}
	runConcurrently(t, 4, func(i int) error { return clients[i%2].EnsureBridge(ctx, brIntSpec()) })
	ofports := make([]int, 6)
	runConcurrently(t, 6, func(i int) error {
		var err error
		ofports[i], err = clients[i%2].EnsurePort(ctx, "br-int", gatewaySpec())
		return err
	})
	for i, p := range ofports {
		if p != 2 {
			t.Errorf("caller %d got ofport %d, want 2", i, p)
		}
	}
	runConcurrently(t, 12, func(i int) error {
		_, err := clients[i%2].EnsurePort(ctx, "br-int", ovs.PortSpec{Name: fmt.Sprintf("int%d", i), Type: ovs.PortTypeInternal})
		return err
	})
	// clients[0]'s cache learns the ofports of the ports clients[1] made a moment after
	// clients[1] does: wait for every port to have one there.
	var ports []ovs.PortInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if ports, err = clients[0].Ports(ctx, "br-int"); err != nil {
			t.Fatal(err)
		}
		if len(ports) == 14 && !slices.ContainsFunc(ports, func(p ovs.PortInfo) bool { return p.Ofport <= 0 }) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ports) != 14 {
		t.Errorf("%d ports, want 14 (local, gateway, 12 internal)", len(ports))
	}
	seen := map[int]string{}
	for _, p := range ports {
		if other, dup := seen[p.Ofport]; dup || p.Ofport <= 0 {
			t.Errorf("port %s at ofport %d (also %q)", p.Name, p.Ofport, other)
		}
		seen[p.Ofport] = p.Name
	}
}

// runConcurrently runs call(0..n-1) at once and fails the test on any error.
func runConcurrently(t *testing.T, n int, call func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- call(i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
