package framework

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
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
	return PodDenyPacketsAt(func() (string, string, error) { return s.BrIntTarget(node), s.OVSDB(node), nil }, node, namespace, name)
}

// PodDenyPacketsAt is PodDenyPackets of a node whose switch at names: ovs-ofctl's target
// for its br-int and its OVSDB remote, asked again on every read (a restarted switch may
// answer elsewhere).
func PodDenyPacketsAt(at func() (brInt, db string, err error), node, namespace, name string) func() (DenyCount, error) {
	var ofport int // the pod's port, looked up again when no flow selects it
	return func() (DenyCount, error) {
		brInt, db, err := at()
		if err != nil {
			return DenyCount{}, err
		}
		for attempt := 0; attempt < 2; attempt++ {
			if ofport == 0 || attempt > 0 {
				n, err := podOFPort(db, node, namespace, name)
				if err != nil {
					return DenyCount{}, err
				}
				ofport = n
			}
			// The deny flow's key as the pipeline builds it: table, priority and match.
			deny := pipeline.PodIngressDeny(uint32(ofport))
			lines, err := ofctl("dump-flows", brInt, deny.Key().Selection())
			if err != nil {
				return DenyCount{}, err
			}
			var c DenyCount
			found := false
			for _, line := range lines {
				f, ok := ParseFlow(line)
				if !ok || f.Table != int(deny.Table.ID) || f.Priority != int(deny.Priority) || !strings.HasSuffix(f.Text, "actions=drop") {
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
		return DenyCount{}, fmt.Errorf("%s has no IngressPolicy deny of %s/%s (port %d)", node, namespace, name, ofport)
	}
}

// PodOFPort is the OpenFlow port of the pod namespace/name on node's br-int.
func (s *Sandbox) PodOFPort(node, namespace, name string) (int, error) {
	return podOFPort(s.OVSDB(node), node, namespace, name)
}

// podOFPort is the OpenFlow port of the pod namespace/name on node's br-int, whose OVSDB
// remote is db.
func podOFPort(db, node, namespace, name string) (int, error) {
	out, err := exec.Command("ovs-vsctl", "--db", db, "--timeout=5", "--bare", "--columns=ofport", "find", "Interface",
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

// EvidenceWait is how long after a denied probe its deny flow's counter may take to count
// it: the switch adds a packet to its flow's counter when it next revalidates the datapath
// flow that carried it, every 500 ms by default.
const EvidenceWait = 2 * time.Second

// ProbeDenied runs probe, which must get no answer, between reads of the deny flow that
// must drop it (deny), and says why it is or is not a denial on evidence: letThrough if
// the probe got any answer (r says which); otherwise, after waiting up to EvidenceWait for
// the counter to rise, denied, or replaced (the flow was installed during the probe: no
// evidence either way), or neither, with why the counter gave no evidence. Probes that
// share a deny flow must not overlap, so that each rise belongs to one probe.
func ProbeDenied(deny func() (DenyCount, error), probe func() responder.Result) (r responder.Result, denied, replaced bool, why string) {
	start := time.Now()
	before, berr := deny()
	r = probe()
	if !r.TimedOut {
		return r, false, false, ""
	}
	var after DenyCount
	var aerr error
	for deadline := time.Now().Add(EvidenceWait); ; time.Sleep(200 * time.Millisecond) { // polls the counter
		after, aerr = deny()
		if berr == nil && aerr == nil {
			denied, replaced = DeniedOnEvidence(before, after, time.Since(start))
		}
		if denied || time.Now().After(deadline) {
			break
		}
	}
	switch {
	case berr != nil || aerr != nil:
		why = fmt.Sprintf("deny flow unreadable: %v", errors.Join(berr, aerr))
	case !denied && !replaced:
		why = fmt.Sprintf("the deny flow counted nothing (%d packets before and after)", after.Packets)
	}
	return r, denied, replaced, why
}

// DeniedTally counts the probes of one denied pair by their evidence. A probe with no
// answer and no evidence is silent: a failure, unless it overlapped a quiet span (a
// restart, until the signal that the switch is repaired), in which the switch handles no
// packet and its silence says nothing either way. Its user serializes calls.
type DeniedTally struct {
	// Denied are the probes the deny flow counted; Replaced those during whose run it was
	// installed anew; LetThrough those that got an answer or another error.
	Denied, Replaced, LetThrough int
	// Silent and Quiet are the starts of the probes without evidence, outside and inside
	// a quiet span.
	Silent, Quiet []time.Time
	why           []string // the first few silent probes, with their time and why
	quiet         [][2]time.Time
}

// Add counts one probe that started at at and ended (its evidence read) at end.
func (d *DeniedTally) Add(at, end time.Time, denied, replaced bool, why string) {
	switch {
	case denied:
		d.Denied++
	case replaced:
		d.Replaced++
	default:
		for _, q := range d.quiet {
			if !end.Before(q[0]) && !at.After(q[1]) {
				d.Quiet = append(d.Quiet, at)
				return
			}
		}
		d.Silent = append(d.Silent, at)
		if len(d.why) < 10 {
			d.why = append(d.why, at.Format("15:04:05.000")+" "+why)
		}
	}
}

// QuietFrom opens a quiet span at at; QuietUntil closes the last one at at.
func (d *DeniedTally) QuietFrom(at time.Time) {
	d.quiet = append(d.quiet, [2]time.Time{at, at.Add(24 * time.Hour)})
}

func (d *DeniedTally) QuietUntil(at time.Time) { d.quiet[len(d.quiet)-1][1] = at }

// Rounds is how many probes were counted that got no answer.
func (d *DeniedTally) Rounds() int { return d.Denied + d.Replaced + len(d.Silent) + len(d.Quiet) }

// Check logs the counts of the pair name during an event and fails the test for silent
// probes and if no probe was denied on evidence at all (let-through probes are the
// caller's to report, with their results).
func (d *DeniedTally) Check(t testing.TB, name, during string) {
	t.Helper()
	t.Logf("probes of the denied pair %s during %s: %d denied on evidence (its deny flow counted them), %d let through or failed otherwise, "+
		"%d silent without evidence, %d silent while the switch was restarting, %d while the deny flow was installed anew",
		name, during, d.Denied, d.LetThrough, len(d.Silent), len(d.Quiet), d.Replaced)
	if len(d.Silent) > 0 {
		t.Errorf("%s: %d probes of the denied pair %s got no answer, but its deny flow did not count them: silence is no proof of a drop (the first %d):\n  %s",
			during, len(d.Silent), name, len(d.why), strings.Join(d.why, "\n  "))
	}
	if d.Denied == 0 {
		t.Errorf("%s: no probe of the denied pair %s was denied on evidence", during, name)
	}
}
