package operate_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkResyncRepairsDelFlows deletes every pod flow of node1's br-int behind the agent's
// back, as an operator's `ovs-ofctl del-flows` would. Nothing tells the agent (ovs-vswitchd
// keeps running, its OpenFlow connection stays up): its periodic resync (the default
// --resync-period, 10 s), which counts the flows of its round, must find the count short
// and resync fully at once. The flows must come back, a1 on node1 must reach b1 again, and
// the agent must have counted a drift.
func (c *cluster) checkResyncRepairsDelFlows(t *testing.T) {
	const node = "node1"
	before, err := c.dumpedFlows(node)
	if err != nil {
		t.Fatal(err)
	}
	drifts := c.scrapeAgent(t, node).sum("kovs_agent_flow_resync_checks_total", labels{"result": "drift"})
	pods := pipeline.CategoryFilter(pipeline.CategoryPod)
	if out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "del-flows", c.s.BrIntTarget(node), "cookie="+pods.String()).CombinedOutput(); err != nil {
		t.Fatalf("ovs-ofctl del-flows cookie=%s on %s: %v: %s", pods, node, err, out)
	}
	start := time.Now()
	if after, err := c.dumpedFlows(node); err != nil || after >= before {
		t.Fatalf("after del-flows of the pod flows: %d flows (%v), before %d: nothing was deleted, the test proves nothing", after, err, before)
	}
	framework.Eventually(t, 45*time.Second, "node1's flows back after del-flows", func() error {
		n, err := c.dumpedFlows(node)
		if err != nil {
			return err
		}
		if n != before {
			return fmt.Errorf("%d flows on br-int, %d before the del-flows", n, before)
		}
		return nil
	})
	t.Logf("%s: the pod flows deleted by hand were back after %s", node, time.Since(start).Round(100*time.Millisecond))
	dst := framework.PodIPs(c.pods["b1"])[0]
	framework.Eventually(t, 20*time.Second, "a1 -> b1 after the repair", func() error {
		if r := c.s.Probe(c.pods["a1"], dst, "80/tcp", time.Second); !r.Connected {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	if got := c.scrapeAgent(t, node).sum("kovs_agent_flow_resync_checks_total", labels{"result": "drift"}); got < drifts+1 {
		t.Errorf("kovs_agent_flow_resync_checks_total{result=\"drift\"} = %v, was %v before the del-flows: the repair was not the resync's count", got, drifts)
	}
}
