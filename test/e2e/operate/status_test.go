package operate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// kovsctl runs `kovsctl status` on the given nodes and returns its output and exit code.
func (c *cluster) kovsctlStatus(t *testing.T, output string, nodes ...string) (string, int) {
	t.Helper()
	l := c.s.Layout
	cmd := exec.Command(filepath.Join(c.env.BinDir, "kovsctl"), "--kubeconfig", l.Kubeconfig(),
		"--ovs-dir", strings.ReplaceAll(l.OVSDir("NODE"), "NODE", "{node}"),
		"status", "--node", strings.Join(nodes, ","), "-o", output,
		"--agent-netns", l.NetNSPrefix()+"{node}",
		"--agent-address", "127.0.0.1:"+strconv.Itoa(c.state(t).AgentMetricsPort))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("kovsctl status: %v\n%s", err, out.String())
	return "", -1
}

func (c *cluster) statusJSON(t *testing.T, nodes ...string) (*kovsctl.Status, int, string) {
	t.Helper()
	out, code := c.kovsctlStatus(t, "json", nodes...)
	var st kovsctl.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("kovsctl status -o json (exit %d): %v\n%s", code, err, out)
	}
	return &st, code, out
}

func (c *cluster) checkStatus(t *testing.T) {
	st, code, out := c.statusJSON(t, nodes...)
	if code != 0 || !st.OK {
		t.Fatalf("kovsctl status exited %d (ok=%v), want 0 on a healthy sandbox:\n%s", code, st.OK, out)
	}
	if len(st.Nodes) != len(nodes) {
		t.Fatalf("status has %d nodes, want %d", len(st.Nodes), len(nodes))
	}
	for _, r := range st.Nodes {
		if r.Agent == nil {
			t.Fatalf("%s: no agent status: %s", r.Node, r.AgentError)
		}
		var peers []string
		for _, p := range r.Agent.Peers {
			peers = append(peers, p.Node)
		}
		want := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == r.Node })
		if !slices.Equal(peers, want) {
			t.Errorf("%s: tunnel peers %v, want %v", r.Node, peers, want)
		}
		if r.Agent.Pods != podsOn(r.Node) {
			t.Errorf("%s: agent reports %d pods, want %d", r.Node, r.Agent.Pods, podsOn(r.Node))
		}
		dumped, err := c.dumpedFlows(r.Node)
		if err != nil {
			t.Fatal(err)
		}
		if r.OVS.Flows != dumped || r.Agent.Flows.Installed != dumped {
			t.Errorf("%s: status flows agent %d / ovs %d, ovs-ofctl dumps %d", r.Node, r.Agent.Flows.Installed, r.OVS.Flows, dumped)
		}
		p := r.Agent.Policy
		if p == nil || !p.Received || p.Connected == nil || !*p.Connected || p.RealizedGeneration != p.ReceivedGeneration {
			t.Errorf("%s: policy status %+v, want connected and realized up to what was received", r.Node, p)
		}
		if !r.OVS.BridgeOK || !r.OVS.VswitchdOK || !r.OVS.TunnelOK || !r.OVS.GatewayOK {
			t.Errorf("%s: OVS report %+v", r.Node, r.OVS)
		}
	}
	table, code := c.kovsctlStatus(t, "table", nodes...)
	if code != 0 {
		t.Fatalf("kovsctl status (table) exited %d:\n%s", code, table)
	}
	for _, node := range nodes {
		if !strings.Contains(table, node) {
			t.Errorf("status table lacks %s:\n%s", node, table)
		}
	}
	t.Logf("kovsctl status:\n%s", table)
}

// checkVswitchdDown stops node2's ovs-vswitchd: node2's agent must turn not ready and
// `kovsctl status` must fail naming it, while node1 stays fine; once ovs-vswitchd is
// back, both recover.
func (c *cluster) checkVswitchdDown(t *testing.T) {
	const node = "node2"
	name := node + "-ovs-vswitchd"
	c.stopProcess(t, name)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_, _ = c.s.Layout.Restart(name)
		}
	})
	framework.Eventually(t, 45*time.Second, node+" agent /readyz failing on its flows", func() error {
		code, body := c.getAgent(t, node, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]flows") {
			return fmt.Errorf("/readyz = %d:\n%s", code, body)
		}
		t.Logf("%s /readyz with ovs-vswitchd stopped:\n%s", node, body)
		return nil
	})
	if code, body := c.getAgent(t, "node1", "/readyz"); code != http.StatusOK {
		t.Errorf("node1 /readyz = %d while only node2's ovs-vswitchd is down:\n%s", code, body)
	}
	out, code := c.kovsctlStatus(t, "table", nodes...)
	if code == 0 || !strings.Contains(out, node+": ovs-vswitchd does not answer") {
		t.Errorf("kovsctl status exited %d, want non-zero naming %s's ovs-vswitchd:\n%s", code, node, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "node1:") {
			t.Errorf("node1 reported a problem while only node2 is broken: %s", line)
		}
	}
	t.Logf("kovsctl status with %s's ovs-vswitchd stopped:\n%s", node, out)

	if _, err := c.s.Layout.Restart(name); err != nil {
		t.Fatal(err)
	}
	restarted = true
	framework.Eventually(t, 60*time.Second, "kovsctl status healthy again", func() error {
		out, code := c.kovsctlStatus(t, "table", nodes...)
		if code != 0 {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
	if code, body := c.getAgent(t, node, "/readyz"); code != http.StatusOK {
		t.Errorf("%s /readyz = %d after ovs-vswitchd came back:\n%s", node, code, body)
	}
}

// stopProcess stops a process of the sandbox (one this test's sandbox started) by the
// pid the sandbox recorded, and waits until it is gone.
func (c *cluster) stopProcess(t *testing.T, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.s.Layout.PidDir(), name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file of %s: %q", name, b)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop %s (pid %d): %v", name, pid, err)
	}
	framework.Eventually(t, 10*time.Second, name+" stopped", func() error {
		if err := syscall.Kill(pid, 0); err == nil {
			if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !bytes.Contains(stat, []byte(") Z")) {
				return fmt.Errorf("pid %d still running", pid)
			}
		}
		return nil
	})
}

// checkAgentDown stops node1's kovs-agent: `kovsctl status` must fail saying the agent
// does not answer (OVS itself stays fine: the flows stay in ovs-vswitchd), and recover
// once the agent is back.
func (c *cluster) checkAgentDown(t *testing.T) {
	const node = "node1"
	name := node + "-kovs-agent"
	c.stopProcess(t, name)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_, _ = c.s.Layout.Restart(name)
		}
	})
	st, code, out := c.statusJSON(t, nodes...)
	if code == 0 || st.OK {
		t.Fatalf("kovsctl status exited %d (ok=%v) with %s's agent stopped:\n%s", code, st.OK, node, out)
	}
	for _, r := range st.Nodes {
		switch {
		case r.Node == node && (r.Agent != nil || !strings.Contains(strings.Join(r.Problems, "\n"), "kovs-agent does not answer")):
			t.Errorf("%s: problems %q, want the agent reported unreachable", r.Node, r.Problems)
		case r.Node == node && (!r.OVS.VswitchdOK || r.OVS.Flows == 0):
			t.Errorf("%s: OVS report %+v: the flows must stay while the agent is down", r.Node, r.OVS)
		case r.Node != node && len(r.Problems) > 0:
			t.Errorf("%s reports problems while only %s's agent is down: %q", r.Node, node, r.Problems)
		}
	}
	table, _ := c.kovsctlStatus(t, "table", nodes...)
	t.Logf("kovsctl status with %s's agent stopped:\n%s", node, table)
	if _, err := c.s.Layout.Restart(name); err != nil {
		t.Fatal(err)
	}
	restarted = true
	framework.Eventually(t, 60*time.Second, "kovsctl status healthy after the agent restart", func() error {
		if out, code := c.kovsctlStatus(t, "table", nodes...); code != 0 {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
}
