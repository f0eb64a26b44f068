package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkBandwidth: on a node kubelet and containerd run, the agent installed from dist/
// follows a running pod's bandwidth annotations as it does under the emulator (the rates
// themselves are measured by test/e2e/edges): annotating node1's web pod gives node1's
// br-int its two meters, used by the pod's flows; removing the annotations removes them.
func checkBandwidth(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	pod := web["node1"].Name
	agent := agentPodOn(t, s, "node1")
	ofctl := func(args ...string) (string, error) {
		return s.Kubectl(append([]string{"exec", "-n", "kube-system", agent, "-c", "kovs-agent", "--",
			"ovs-ofctl", "-O", "OpenFlow15"}, args...)...)
	}
	wait := func(what string, want map[uint32]bool) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, what, func() error {
			out, err := ofctl("dump-meters", "br-int")
			if err != nil {
				return fmt.Errorf("dump-meters: %w: %s", err, out)
			}
			meters, err := ovs.ParseMeterDump(out)
			if err != nil {
				return err
			}
			meters = framework.PodMeters(meters)
			rates := map[uint32]bool{}
			for _, m := range meters {
				rates[m.RateKbps] = true
			}
			if len(meters) != len(want) || len(rates) != len(want) {
				return fmt.Errorf("meters %v", meters)
			}
			for r := range want {
				if !rates[r] {
					return fmt.Errorf("meters %v, want rates %v kbit/s", meters, want)
				}
			}
			flows, err := ofctl("dump-flows", "br-int")
			if err != nil {
				return fmt.Errorf("dump-flows: %w", err)
			}
			if used := strings.Count(flows, "meter:"); used != len(want) {
				return fmt.Errorf("%d flows use a meter, want %d", used, len(want))
			}
			return nil
		})
	}
	kubectlOK(t, s, "-n", ns, "annotate", "pod", pod, "kubernetes.io/egress-bandwidth=20M", "kubernetes.io/ingress-bandwidth=30M")
	wait("node1's meters for "+pod, map[uint32]bool{20_000: true, 30_000: true})
	kubectlOK(t, s, "-n", ns, "annotate", "pod", pod, "kubernetes.io/egress-bandwidth-", "kubernetes.io/ingress-bandwidth-")
	wait("no meters on node1", nil)
}

// agentPodOn is the name of the kovs-agent pod on node.
func agentPodOn(t *testing.T, s *framework.Sandbox, node string) string {
	t.Helper()
	agents, err := s.Client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=kovs-agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range agents.Items {
		if p.Spec.NodeName == node {
			return p.Name
		}
	}
	t.Fatalf("no kovs-agent pod on %s", node)
	return ""
}
