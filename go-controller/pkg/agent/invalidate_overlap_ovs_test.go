package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// revalidationOnly is a --datapath-invalidation for this test only: the agent invalidates
// nothing itself and each bundle is followed by two rounds of ovs-vswitchd's own
// revalidation (revalidator/wait), which is all a policy change would need on an OVS with
// the fix of v3.1.3 ("dpif-netdev: Fix dpif_netdev_flow_put"). Set
// KOVS_TEST_DATAPATH_INVALIDATION=revalidation-only to run the test with it (it fails on
// OVS 3.1.0).
const revalidationOnly = "revalidation-only"

// onRevalidationOnly is the OnApplied hook of revalidationOnly.
func (r *trafficRig) onRevalidationOnly(context.Context, SwitchPlan) error {
	for range 2 {
		r.rig.Appctl(r.t, "revalidator/wait")
	}
	return nil
}

// OVS 3.1.0's userspace datapath applies a revalidator's modify of a megaflow to the first
// overlapping megaflow a lookup by the flow's key finds, not to the one its UFID names
// (docs/upgrades.md, "Policy changes and traffic they do not concern"), and the agent's
// invalidation must cover it. The three steps that bring it about, on one pod's port (the
// datapath classifies each input port apart):
//  1. d may reach c on UDP 8000 only: d -> c:8000's megaflow matches the port exactly
//     (F1), allowed;
//  2. relaxed, d may reach c on any port: F1 keeps its narrower mask (a revalidator only
//     narrows a megaflow that needs more bits), and d -> c:8001 installs a megaflow that
//     wildcards the port (F2), which overlaps F1;
//  3. restricted, only a may reach c: F1's modify to drop lands on F2, and F1 keeps
//     forwarding new connections.
//
// Which of two overlapping megaflows the lookup finds first is the order of their masks'
// subtables in the port's classifier: the order they were made in (ovs-vswitchd's main
// thread, which serves these ports, does not re-rank them). So that F2's mask comes first,
// a TCP connection d -> b made before step 1 holds a megaflow of the same mask as F2
// throughout (a UDP port rule never makes a TCP megaflow match the port).
//
// Checked in the datapath after step 3: no megaflow that matches d -> c:8000 still
// commits and outputs a new connection; then F2 is deleted (as its idle timeout would)
// and a new connection d -> c:8000 must be dropped, on evidence (probe). Seen failing with
// revalidationOnly on the installed ovs-vswitchd 3.1.0: F1 kept ct(commit),output after
// step 3 and, F2 deleted, the denied datagram arrived at c.
func TestPolicyChangeOverOverlappingMegaflows(t *testing.T) {
	modes := []string{DatapathInvalidationPurge, DatapathInvalidationNarrow}
	if m := os.Getenv("KOVS_TEST_DATAPATH_INVALIDATION"); m != "" {
		modes = []string{m}
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { policyChangeOverOverlappingMegaflows(t, mode) })
	}
}

func policyChangeOverOverlappingMegaflows(t *testing.T, mode string) {
	r := newTrafficRig(t, mode)
	c := r.listen("c")
	d := []string{"d"}
	udp := func(port int32) policy.Port { return policy.Port{Protocol: policy.UDP, Port: port} }

	r.setPolicy(cShare(true, d, udp(7999)))
	r.sendFrame("d", tcpSYN(r.pods["d"], r.pods["b"], 30000, 9000))
	r.setPolicy(cShare(true, d, udp(8000)))
	if passed, ev := r.probe("d", "c", 8000, c); !passed {
		t.Fatalf("step 1, d -> c:8000 allowed: %s", ev)
	}
	r.setPolicy(cShare(true, d))
	if passed, ev := r.probe("d", "c", 8001, c); !passed {
		t.Fatalf("step 2, d -> c:8001 allowed: %s", ev)
	}
	// The agent's invalidation deletes F1 at step 2 already; without it, F1 must be there.
	if f1, f2 := r.newConnFlowsDToC(8000); len(f2) != 1 || (mode == revalidationOnly && len(f1) != 1) {
		t.Fatalf("step 2 made %d megaflows of d -> c:8000 that wildcard the port and %d that match it, want 1 and 1 "+
			"(0 with the agent's invalidation): the pipeline no longer sets this test up\n%s", len(f2), len(f1), r.rig.Appctl(t, "dpctl/dump-flows", "-m"))
	}

	r.setPolicy(cShare(true, []string{"a"}))
	f1, f2 := r.newConnFlowsDToC(8000)
	for _, f := range append(f1, f2...) {
		if strings.Contains(f.Actions, "ct(commit") {
			t.Errorf("step 3, d denied: the datapath flow %s still commits and outputs new connections d -> c:8000: %s",
				f.UFID, f.Actions)
		}
	}
	for _, f := range f2 {
		r.rig.Appctl(t, "dpctl/del-flow", f.UFID)
	}
	if passed, ev := r.probe("d", "c", 8000, c); passed {
		t.Errorf("step 3, d denied: the first new connection d -> c:8000 passed (%s)\ndatapath:\n%s",
			ev, r.rig.Appctl(t, "dpctl/dump-flows", "-m"))
	}
}

// newConnFlowsDToC are the datapath flows of new UDP connections from d to c, after
// conntrack, that match port: those that match it exactly and those that wildcard it.
func (r *trafficRig) newConnFlowsDToC(port uint16) (exact, wild []ovs.DatapathFlow) {
	r.t.Helper()
	flows := r.parsedDatapathFlows()
	for _, f := range flows {
		if !strings.Contains(f.Key, "ct_state(0x21/") || !strings.Contains(f.Key, "ipv4(src=10.244.1.13,dst=10.244.1.12,proto=17,") {
			continue
		}
		switch {
		case strings.HasSuffix(f.Key, fmt.Sprintf(",dst=%d)", port)):
			exact = append(exact, f)
		case strings.HasSuffix(f.Key, "/0)"):
			wild = append(wild, f)
		}
	}
	return exact, wild
}

// tcpSYN is an Ethernet frame with a TCP SYN from pod src to pod dst through the
// gateway, with valid checksums (the userspace conntrack checks them).
func tcpSYN(src, dst pipeline.PodPort, sport, dport uint16) []byte {
	f := ipv4Frame(src, dst, 6, 20)
	tcp := f[34:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], 1)
	tcp[12], tcp[13] = 5<<4, 0x02 // header of 5 words; SYN
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	pseudo := append(slices.Clone(f[26:34]), 0, 6, 0, byte(len(tcp))) // source, destination
	binary.BigEndian.PutUint16(tcp[16:], ^onesSum(append(pseudo, tcp...)))
	return f
}
