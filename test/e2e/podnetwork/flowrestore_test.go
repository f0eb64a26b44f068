package podnetwork_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkFlowRestoreWaitRestart restarts node2's ovs-vswitchd as a hot restart does (and
// kovs-ovs when the database holds the agent's bridge alone): stopped,
// other_config:flow-restore-wait=true set, started again, so that it handles no packet
// until kovs-agent has put its flows back and cleared the key. On the userspace datapath
// the datapath lives in ovs-vswitchd, so traffic through node2 pauses all the same; the
// test measures that pause under traffic (a new connection every 100 ms on each of two
// pairs across node2, each waiting 1 s) and requires the established sessions across
// node2 to survive it (their echoes wait up to 60 s, TCP retransmitting meanwhile), a
// pair the policy denies on node2 never to connect (no packet meets an empty table, and
// policy is never open) and its probes to be dropped by its deny flow (evidence) except
// between the kill and the key's clearing, the agent to clear the key, and every new connection to succeed
// once it has.
func (c *cluster) checkFlowRestoreWaitRestart(t *testing.T) {
	a, cc := c.pods["a"], c.pods["c"]
	remove := c.isolateNamespaceX(t)
	defer remove()
	pairs := []pair{{from: a, to: cc}, {from: cc, to: a}, {from: c.hosts["node1"], to: cc, denied: true}}
	tr := c.startTrafficEcho(t, pairs, 100*time.Millisecond, 60*time.Second)
	tr.await(t, 5, "before the restart")
	db := "--db=" + c.s.OVSDB("node2")
	start := time.Now()
	tr.quietFrom(start)
	if err := c.s.Layout.Kill("node2-ovs-vswitchd"); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ovs-vsctl", db, "--timeout=10", "--no-wait", "set", "Open_vSwitch", ".",
		"other_config:flow-restore-wait=true").CombinedOutput(); err != nil {
		t.Fatalf("set flow-restore-wait: %v\n%s", err, out)
	}
	if _, err := c.s.Layout.Start("node2-ovs-vswitchd"); err != nil {
		t.Fatal(err)
	}
	// The agent clearing the key is the evidence that the restart went through
	// flow-restore-wait and that the agent ended it.
	framework.Eventually(t, 60*time.Second, "node2's kovs-agent to clear flow-restore-wait", func() error {
		out, err := exec.Command("ovs-vsctl", db, "--timeout=5", "get", "Open_vSwitch", ".", "other_config").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if strings.Contains(string(out), "flow-restore-wait") {
			return fmt.Errorf("other_config %s", strings.TrimSpace(string(out)))
		}
		return nil
	})
	cleared := time.Since(start)
	tr.quietUntil(time.Now())
	tr.await(t, 20, "after the restart")
	tr.finish()
	pause := tr.report(t, "node2's ovs-vswitchd restart with flow-restore-wait")
	t.Logf("node2's ovs-vswitchd restarted with flow-restore-wait: the agent cleared it %s after the kill; "+
		"longest run of failed new connections across node2: %s", cleared.Round(time.Millisecond), pause.Round(time.Millisecond))

	again := c.startTraffic(t, pairs, 100*time.Millisecond)
	again.await(t, 20, "once flow-restore-wait is cleared")
	again.finish()
	again.check(t, "the 20 rounds once flow-restore-wait is cleared")
}

// report logs what the traffic saw through an event that is allowed to pause it:
// established sessions must survive it and a denied pair must never connect, but new
// connections of allowed pairs may fail while it lasts. It returns the longest run of
// failed new connections of the allowed pairs, the pause.
func (tr *traffic) report(t *testing.T, during string) time.Duration {
	t.Helper()
	var pause time.Duration
	for _, s := range tr.sessions {
		t.Logf("established session %s during %s: %d round trips, broken: %v", s.name, during, s.n, s.err != nil)
		if s.err != nil {
			t.Errorf("%s: established connection %s broke after %d round trips: %v", during, s.name, s.n, s.err)
		}
	}
	for _, f := range tr.fresh {
		if f.denied {
			f.evidence.Check(t, f.name, during)
			if f.failed > 0 {
				t.Errorf("%s: %d of %d probes of the denied pair %s did not time out:\n  %s", during, f.failed, f.ok+f.failed, f.name,
					strings.Join(f.failures, "\n  "))
			}
			continue
		}
		t.Logf("new connections %s during %s: %d attempted, %d failed, longest run of failures %s", f.name, during, f.ok+f.failed, f.failed, f.longestGap)
		pause = max(pause, f.longestGap)
	}
	return pause
}
