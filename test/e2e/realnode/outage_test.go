package realnode_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/kovs-net/kovs/test/e2e/framework"
	corev1 "k8s.io/api/core/v1"
)

// outageEnv sets how long checkControllerOutage keeps kovs-controller down (Go duration).
// `make test` leaves it unset: the outage then lasts as long as its checks (the new pods
// start only past the agent's 30 s wait for a new pod's policy, so about 35 s); the
// 10-minute outage of docs/upgrades.md is the same test with KOVS_CONTROLLER_OUTAGE=10m.
const outageEnv = "KOVS_CONTROLLER_OUTAGE"

// checkControllerOutage: with every kovs-controller replica gone, pods created meanwhile
// start on every node (their addresses are the node agents'), each with an address of
// its node's block that no other pod has, while the pods already running keep talking;
// once a controller leads again, the new pods reach and are reached by the others (their
// policy is known). Pods never open before that: they start closed (pending).
func checkControllerOutage(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	t.Helper()
	var outage time.Duration
	if v := os.Getenv(outageEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("%s=%q: want a Go duration of at least 1m", outageEnv, v)
		}
		outage = d
	}
	kubectlOK(t, s, "-n", "kube-system", "scale", "deployment/kovs-controller", "--replicas=0")
	kubectlOK(t, s, "-n", "kube-system", "wait", "--for=delete", "pod", "-l", "app=kovs-controller", "--timeout=120s")
	down := time.Now()
	restored := false
	restore := func() {
		if !restored {
			restored = true
			kubectlOK(t, s, "-n", "kube-system", "scale", "deployment/kovs-controller", "--replicas=2")
		}
	}
	defer restore()

	s.Apply(outageDeployment)
	kubectlOK(t, s, "-n", ns, "rollout", "status", "deployment/outage", "--timeout=240s")
	started := time.Since(down)
	newPods := podsOf(t, s, ns, "app=outage")
	if len(newPods) != 3 {
		t.Fatalf("outage pods on %d nodes, want 3: %v", len(newPods), newPods)
	}
	checkAddresses(t, s, newPods)
	seen := map[netip.Addr]string{}
	for _, group := range []map[string]corev1.Pod{web, newPods} {
		for _, p := range group {
			for _, ip := range framework.PodIPs(&p) {
				if other, dup := seen[ip]; dup {
					t.Errorf("pods %s and %s share %s", other, p.Name, ip)
				}
				seen[ip] = p.Name
			}
		}
	}
	t.Logf("kovs-controller down: 3 new pods Running and Ready %s after it went (addresses %v)", started.Round(time.Second), podIPList(newPods))
	checkPodToPod(t, s, web) // the running pods are untouched
	if rest := outage - time.Since(down); rest > 0 {
		time.Sleep(rest) // the outage is the test's input, not a wait for a signal
	}
	checkPodToPod(t, s, web)
	restore()
	back := time.Now()
	kubectlOK(t, s, "-n", "kube-system", "rollout", "status", "deployment/kovs-controller", "--timeout=180s")
	framework.Eventually(t, 120*time.Second, "new pods and old ones reach each other once a controller leads", func() error {
		for node, np := range newPods {
			for other, wp := range web {
				if node == other {
					continue
				}
				if v, err := connect(s, ns, np.Name, framework.PodIPs(&wp)[0], 8080); err != nil || v != "CONNECTED" {
					return fmt.Errorf("%s (%s) -> web on %s: %s %v", np.Name, node, other, v, err)
				}
				if v, err := connect(s, ns, wp.Name, framework.PodIPs(&np)[0], 8080); err != nil || v != "CONNECTED" {
					return fmt.Errorf("web on %s -> %s (%s): %s %v", other, np.Name, node, v, err)
				}
			}
		}
		return nil
	})
	t.Logf("kovs-controller down for %s; new pods connected %s after it was scaled back", time.Since(down).Round(time.Second)-time.Since(back).Round(time.Second), time.Since(back).Round(time.Second))
	kubectlOK(t, s, "-n", ns, "delete", "deployment", "outage", "--wait=true")
}

func podIPList(pods map[string]corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, p := range pods {
		out = append(out, framework.PodIPs(&p)...)
	}
	return out
}

// One agnhost netexec per node, created while kovs-controller is down.
var outageDeployment = netexecDeployment("outage")
