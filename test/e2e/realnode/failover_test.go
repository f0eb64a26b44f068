package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// failoverClient is a pod web-from-access allows, created on node1 while no controller
// leads.
const failoverClient = `apiVersion: v1
kind: Pod
metadata: {name: failover-client, namespace: ` + ns + `, labels: {access: "yes"}}
spec:
  nodeName: node1
  containers: [{name: c, image: ` + agnhost + `, imagePullPolicy: IfNotPresent, args: [pause]}]
`

// checkControllerFailover is issue 27's controller failover on real nodes, in the shape
// dist/ ships: two replicas of a Deployment, the leader labelled kovs.io/leader=true, the
// agents dialling the ready endpoints of the kovs-controller Service, which selects that
// label, and dist's probes. The leading replica hangs (its process stopped, SIGSTOP: a
// frozen process keeps its sockets open, answers nothing, releases no Lease and removes
// no label). Right after, a NetworkPolicy is written (web-from-access) and a pod is
// created that it allows (failover-client, on node1). The standby must take the Lease;
// the hung pod must leave the Service (readiness) and lose the label (liveness restarts
// its container, whose process, a standby, unlabels its pod); the policy must be realized
// on every node through the new leader (its realization annotation, which the new leader
// writes from the agents' reports, and client-no denied on evidence at every web pod);
// the new pod must start and reach web on every node. Reported: the times to lead, to
// realize the policy, to start the pod and to be the only labelled pod, each from the hang.
func checkControllerFailover(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	ctx := context.Background()
	holder := func() string {
		l, err := s.Client.CoordinationV1().Leases("kube-system").Get(ctx, "kovs-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	old := holder()
	oldPod, _, ok := strings.Cut(old, "_")
	if !ok {
		t.Fatalf("Lease kube-system/kovs-controller held by %q: want <pod>_<uuid>", old)
	}
	pid := nodeProcess(t, s, "kovs-controller", "POD_NAME="+oldPod)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the leading kovs-controller (pid %d): %v", pid, err)
	}
	hung := time.Now()
	// kubelet's liveness probe kills it; should the test end first, it goes on.
	defer func() {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "kovs-controller" {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	s.Apply(webFromAccess)
	defer kubectlOK(t, s, "-n", ns, "delete", "networkpolicy", "web-from-access")
	s.Apply(failoverClient)
	defer kubectlOK(t, s, "-n", ns, "delete", "pod", "failover-client", "--wait=false")

	var leader string
	framework.Eventually(t, 90*time.Second, "another kovs-controller to take the Lease", func() error {
		if h := holder(); h != "" && h != old {
			leader = h
			return nil
		}
		return fmt.Errorf("held by %q", holder())
	})
	led := time.Since(hung)
	waitRealized(t, s, ns, "web-from-access")
	realized := time.Since(hung)
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod/failover-client", "--timeout=120s")
	started := time.Since(hung)
	leaderPod, _, _ := strings.Cut(leader, "_")
	framework.Eventually(t, 120*time.Second, "the new leader's pod to carry the leader label alone", func() error {
		pods, err := s.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=kovs-controller,kovs.io/leader"})
		if err != nil {
			return err
		}
		var labelled []string
		for _, p := range pods.Items {
			labelled = append(labelled, p.Name)
		}
		if len(labelled) != 1 || labelled[0] != leaderPod {
			return fmt.Errorf("labelled %v, the Lease names %s", labelled, leaderPod)
		}
		return nil
	})
	labelled := time.Since(hung)
	checkWebFromAccess(t, s, web, "after the failover", "client-yes", "failover-client")
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	t.Logf("the leading kovs-controller (pod %s) hung: pod %s took the Lease %s later; web-from-access, written just after, realized on every node at %s; failover-client, created just after, Ready at %s; the new leader's pod the only labelled one at %s",
		oldPod, leaderPod, round(led), round(realized), round(started), round(labelled))
}
