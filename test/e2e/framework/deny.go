package framework

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// DenyCount is what a pod's default deny flows had dropped when they were read.
type DenyCount struct {
	// Packets is the sum of their packet counters.
	Packets uint64
	// Youngest is the age of the most recently installed of them: a flow installed after
	// an earlier read started counting from zero.
	Youngest time.Duration
}

// PodDenyPackets returns a reader of the packets node's br-int dropped on their way into
// the pod namespace/name by its IngressPolicy flow at priority 50 (`reg1=<its ofport>
// actions=drop`): the ingress default deny of a pod its NetworkPolicy isolates, or the
// pending deny of a pod the node has no policy for yet (ovs-flows/README.md, IngressPolicy
// and Cookies). A rise between two reads is the evidence that policy, not a lost packet
// or a slow machine, dropped a connection attempt to the pod. The reader fails while the
// switch has no such flow (restarting, not yet programmed) or the pod has no port.
func (s *Sandbox) PodDenyPackets(node, namespace, name string) func() (DenyCount, error) {
	var ofport int // the pod's port, looked up again when no flow selects it
	return func() (DenyCount, error) {
		for attempt := 0; attempt < 2; attempt++ {
			if ofport == 0 || attempt > 0 {
				n, err := s.podOFPort(node, namespace, name)
				if err != nil {
					return DenyCount{}, err
				}
				ofport = n
			}
			lines, err := ofctl("dump-flows", s.BrIntTarget(node), fmt.Sprintf("table=70,reg1=%d", ofport))
			if err != nil {
				return DenyCount{}, err
			}
			var c DenyCount
			found := false
			for _, line := range lines {
				f, ok := ParseFlow(line)
				if !ok || f.Table != 70 || f.Priority != 50 || !strings.HasSuffix(f.Text, "actions=drop") {
					continue
				}
				if !found || f.Age < c.Youngest {
					c.Youngest = f.Age
				}
				c.Packets += f.Packets
				found = true
			}
			if found {
				return c, nil
			}
		}
		return DenyCount{}, fmt.Errorf("%s has no IngressPolicy deny of %s/%s (reg1=%d, priority 50)", node, namespace, name, ofport)
	}
}

// podOFPort is the OpenFlow port of the pod namespace/name on node's br-int.
func (s *Sandbox) podOFPort(node, namespace, name string) (int, error) {
	out, err := exec.Command("ovs-vsctl", "--db", s.OVSDB(node), "--timeout=5", "--bare", "--columns=ofport", "find", "Interface",
		"external_ids:kovs.io/pod-namespace="+namespace, "external_ids:kovs.io/pod-name="+name).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: the port of %s/%s: %v: %s", node, namespace, name, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s: the port of %s/%s: ofport %q", node, namespace, name, strings.TrimSpace(string(out)))
	}
	return n, nil
}

// DeniedOnEvidence tells whether a probe that got no answer was dropped by the deny whose
// counts before and after it are given; elapsed is the time from the start of the read
// before to the end of the read after. A rise is evidence. So is any packet on a deny
// flow installed during the probe (younger than elapsed: it counted only what came after
// it). replaced says a flow was installed during the probe and counted nothing: the
// packet may have met the flow it replaced, whose count is gone, so the probe proves
// nothing either way.
func DeniedOnEvidence(before, after DenyCount, elapsed time.Duration) (denied, replaced bool) {
	if after.Youngest < elapsed {
		return after.Packets > 0, after.Packets == 0
	}
	return after.Packets > before.Packets, false
}
