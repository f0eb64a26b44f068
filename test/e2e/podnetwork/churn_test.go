package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkChurn creates 100 pods in waves of 25 over the nodes and deletes them in waves:
// no two live pods ever share an address, no address is handed out twice while the blocks
// still have never-used ones (freed addresses go to the back of the line), and when they
// are gone no OVS port, no pod flow (by cookie) and no pod namespace is left.
func (c *cluster) checkChurn(t *testing.T) {
	const waves, perWave = 4, 25
	ctx := context.Background()
	everAssigned := map[netip.Addr]string{}
	var live [][]string
	for w := 0; w < waves; w++ {
		var names []string
		for i := 0; i < perWave; i++ {
			name := fmt.Sprintf("churn-%d-%d", w, i)
			c.s.CreatePod(t, framework.PodSpec{Namespace: "churn", Name: name, Node: fmt.Sprintf("node%d", i%nodes+1)})
			names = append(names, name)
		}
		for _, name := range names {
			p := c.s.WaitRunning(t, "churn", name, 2*podTimeout)
			for _, ip := range framework.PodIPs(p) {
				if prev, seen := everAssigned[ip]; seen {
					t.Errorf("%s got %s, already handed to %s while never-used addresses remain", name, ip, prev)
				}
				everAssigned[ip] = name
			}
		}
		live = append(live, names)
		c.checkNoDuplicates(t)
		if w >= 1 { // delete the previous wave while the next ones come
			c.deleteWave(t, live[0])
			live = live[1:]
		}
	}
	for _, names := range live {
		c.deleteWave(t, names)
	}
	pods, _ := c.s.Client.CoreV1().Pods("churn").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Fatalf("%d churn pods left", len(pods.Items))
	}
	framework.Eventually(t, 30*time.Second, "no stale ports, flows or namespaces", func() error {
		return c.staleState()
	})
	t.Logf("%d pods created and deleted; %d distinct addresses handed out", waves*perWave, len(everAssigned))
}

func (c *cluster) deleteWave(t *testing.T, names []string) {
	ctx := context.Background()
	for _, name := range names {
		if err := c.s.Client.CoreV1().Pods("churn").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		c.s.DeletePod(t, "churn", name, podTimeout)
	}
}

// checkNoDuplicates fails if two live pods share an address.
func (c *cluster) checkNoDuplicates(t *testing.T) {
	pods, err := c.s.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, p := range pods.Items {
		if p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if other, dup := owner[ip.IP]; dup {
				t.Errorf("pods %s and %s/%s share %s", other, p.Namespace, p.Name, ip.IP)
			}
			owner[ip.IP] = p.Namespace + "/" + p.Name
		}
	}
}

// staleState reports pod ports, pod flows and pod namespaces of churn pods left on nodes.
func (c *cluster) staleState() error {
	live := map[string]bool{}
	for _, p := range c.pods {
		live[p.Namespace+"/"+p.Name] = true
	}
	var problems []string
	for i := 1; i <= nodes; i++ {
		node := fmt.Sprintf("node%d", i)
		out, err := exec.Command("ovs-vsctl", "--db", c.s.OVSDB(node), "--bare", "--columns", "external_ids",
			"find", "Interface", "external_ids:kovs.io/owner=pod").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", node, err, out)
		}
		if n := strings.Count(string(out), "kovs.io/pod-namespace=churn"); n > 0 {
			problems = append(problems, fmt.Sprintf("%s has %d stale churn pod ports", node, n))
		}
		if n := strings.Count(string(out), "kovs.io/owner=pod"); n != podsOn(c, node) {
			problems = append(problems, fmt.Sprintf("%s has %d pod ports, want %d", node, n, podsOn(c, node)))
		}
		filter := pipeline.CategoryFilter(pipeline.CategoryPod)
		flows, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", c.s.BrIntTarget(node), "cookie="+filter.String()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", node, err, flows)
		}
		cookies := map[string]bool{}
		for _, line := range strings.Split(string(flows), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "cookie=") {
				cookies[strings.TrimSuffix(f[0], ",")] = true
			}
		}
		if len(cookies) != podsOn(c, node) {
			problems = append(problems, fmt.Sprintf("%s has pod flows of %d pods, want %d", node, len(cookies), podsOn(c, node)))
		}
		entries, _ := os.ReadDir("/run/netns")
		count := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), c.s.Layout.PodNetNSPrefix(node)) {
				count++
			}
		}
		if count != podsOn(c, node) {
			problems = append(problems, fmt.Sprintf("%s has %d pod namespaces, want %d", node, count, podsOn(c, node)))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func podsOn(c *cluster, node string) int {
	n := 0
	for _, p := range c.pods {
		if p.Spec.NodeName == node {
			n++
		}
	}
	return n
}

func fileNewerThan(path string, t time.Time) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.ModTime().Before(t) {
		return fmt.Errorf("%s not rewritten yet", path)
	}
	return nil
}
