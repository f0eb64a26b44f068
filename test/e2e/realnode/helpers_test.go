package realnode_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// agnhost is the upstream e2e test image, built here and imported into every node.
const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// execIn runs a command in a pod's container through kubectl exec (kube-apiserver,
// kubelet, containerd and runc), and returns its combined output.
func execIn(s *framework.Sandbox, namespace, pod string, cmd ...string) (string, error) {
	return s.Kubectl(append([]string{"exec", "-n", namespace, pod, "--"}, cmd...)...)
}

// clientIP asks agnhost netexec at addr (port 8080) which source address it saw, from
// inside pod.
func clientIP(s *framework.Sandbox, namespace, pod string, addr netip.Addr) (netip.Addr, error) {
	url := "http://" + net.JoinHostPort(addr.String(), "8080") + "/clientip"
	out, err := execIn(s, namespace, pod, "curl", "-sS", "--max-time", "5", url)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s -> %s: %v: %s", pod, url, err, out)
	}
	host, _, err := net.SplitHostPort(strings.TrimSpace(out))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s -> %s answered %q: %v", pod, url, out, err)
	}
	return netip.ParseAddr(host)
}

// connect tries a TCP connection from inside pod with agnhost's own client and reports
// "CONNECTED", "TIMEOUT", "REFUSED", or an error for anything else (a failed exec is an
// error, never a deny).
func connect(s *framework.Sandbox, namespace, pod string, addr netip.Addr, port int) (string, error) {
	out, err := execIn(s, namespace, pod, "/agnhost", "connect", net.JoinHostPort(addr.String(), fmt.Sprint(port)),
		"--timeout=3s", "--protocol=tcp")
	if err == nil {
		return "CONNECTED", nil
	}
	for _, verdict := range []string{"TIMEOUT", "REFUSED"} {
		if strings.Contains(out, verdict) {
			return verdict, nil
		}
	}
	return "", fmt.Errorf("agnhost connect from %s to %s:%d: %v: %s", pod, addr, port, err, out)
}

// podsOf lists the running pods of a label selector, by node.
func podsOf(t *testing.T, s *framework.Sandbox, namespace, selector string) map[string]corev1.Pod {
	t.Helper()
	list, err := s.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Spec.NodeName] = p
	}
	return out
}

// waitRealized waits until the NetworkPolicy's realization annotation says every node it
// concerns enforces it.
func waitRealized(t *testing.T, s *framework.Sandbox, namespace, name string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "NetworkPolicy "+namespace+"/"+name+" realized on every node", func() error {
		np, err := s.Client.NetworkingV1().NetworkPolicies(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v, ok := np.Annotations[realization.AnnotationKey]
		if !ok {
			return fmt.Errorf("no %s annotation yet", realization.AnnotationKey)
		}
		st, err := realization.ParseStatus(v)
		if err != nil {
			return err
		}
		if st.Concerned == 0 || !st.Complete() {
			return fmt.Errorf("realization %s", v)
		}
		return nil
	})
}

// kubectlOK runs kubectl and fails the test on error.
func kubectlOK(t *testing.T, s *framework.Sandbox, args ...string) string {
	t.Helper()
	out, err := s.Kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
