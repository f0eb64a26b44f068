// End-to-end tests of kovs-sandbox itself: a real control plane, node emulators that call
// a real CNI plugin (the reference bridge plugin, since these tests do not depend on
// kovs), exec and probe, and a teardown that leaves nothing behind. Needs root.
package sandbox_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestSandboxCluster runs one 3-node sandbox without a network plugin and checks what a
// cluster operator would: nodes register, kubectl works, a node turns Ready when a CNI
// plugin is installed and pods are scheduled to it and get addresses, a node without a
// plugin keeps its pods from running with kubelet's reason, hostNetwork pods run anywhere
// and exec and probe work from them, and down leaves nothing behind.
func TestSandboxCluster(t *testing.T) {
	env := framework.Require(t)
	before := framework.TakeFootprint()
	s := framework.Up(t, env, "--nodes", "3", "--network", "none")
	state, err := s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	ctx := framework.Context(t)

	t.Run("nodes register, not ready without a network plugin", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "3 nodes NotReady for lack of a CNI plugin", func() error {
			nodes, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(nodes.Items) != 3 {
				return fmt.Errorf("%d nodes", len(nodes.Items))
			}
			for _, n := range nodes.Items {
				c := readyCondition(&n)
				if c == nil || c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "NetworkReady=false") {
					return fmt.Errorf("node %s Ready condition %+v", n.Name, c)
				}
				if len(n.Status.Addresses) < 2 {
					return fmt.Errorf("node %s has no InternalIP", n.Name)
				}
			}
			return nil
		})
	})

	t.Run("kubectl creates and deletes a namespace", func(t *testing.T) {
		if out, err := s.Kubectl("create", "namespace", "scratch"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if out, err := s.Kubectl("delete", "namespace", "scratch", "--wait=true", "--timeout=60s"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if out, _ := s.Kubectl("get", "namespace", "scratch"); !strings.Contains(out, "NotFound") {
			t.Fatalf("namespace still there: %s", out)
		}
	})

	installBridgePlugin(t, s.Layout.CNIBinDir("node1"), s.Layout.CNIConfDir("node1"), s.Layout.NodeDir("node1"))

	t.Run("a node with a CNI plugin turns Ready and runs scheduled pods", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "node1 Ready", func() error {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := readyCondition(n); c == nil || c.Status != corev1.ConditionTrue {
				return fmt.Errorf("Ready condition %+v", c)
			}
			return nil
		})
		s.Apply(pod("default", "web-a", "", false) + "---\n" + pod("default", "web-b", "", false))
		a := waitRunning(t, s, "default", "web-a")
		b := waitRunning(t, s, "default", "web-b")
		for _, p := range []*corev1.Pod{a, b} {
			if p.Spec.NodeName != "node1" {
				t.Errorf("scheduler put %s on %s, want the only Ready node, node1", p.Name, p.Spec.NodeName)
			}
			out, err := s.Run("exec", "default/"+p.Name, "--", "ip", "-o", "-4", "addr", "show", "dev", "eth0")
			if err != nil || !strings.Contains(out, " "+p.Status.PodIP+"/") {
				t.Errorf("pod %s: eth0 addresses %q (err %v), status IP %s", p.Name, out, err, p.Status.PodIP)
			}
		}
		for _, proto := range []string{"tcp", "udp", "sctp"} {
			out, err := s.Run("probe", "default/web-a", b.Status.PodIP+":80/"+proto)
			want := "responder default/web-b saw source " + a.Status.PodIP
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("probe web-a -> web-b %s: %q (err %v), want %q", proto, out, err, want)
			}
		}
		if out, err := s.Run("probe", "default/web-a", b.Status.PodIP+":82/tcp"); err == nil || !strings.HasPrefix(out, "refused") {
			t.Errorf("probe of a port nobody serves: %q (err %v), want refused", out, err)
		}
	})

	t.Run("a pod on a node without a network plugin stays pending with the reason", func(t *testing.T) {
		s.Apply(pod("default", "stuck", "node2", false))
		framework.Eventually(t, 30*time.Second, "stuck to report NetworkNotReady", func() error {
			p, err := s.Client.CoreV1().Pods("default").Get(ctx, "stuck", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionFalse &&
					c.Reason == "NetworkNotReady" && strings.Contains(c.Message, "cni plugin not initialized") {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", p.Status.Conditions)
		})
		time.Sleep(3 * time.Second)
		p, err := s.Client.CoreV1().Pods("default").Get(ctx, "stuck", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" {
			t.Fatalf("pod on a node without a network plugin: phase %s, IP %q (err %v)", p.Status.Phase, p.Status.PodIP, err)
		}
		out, _ := s.Kubectl("get", "events", "--field-selector", "involvedObject.name=stuck,reason=NetworkNotReady", "-o", "name")
		if strings.TrimSpace(out) == "" {
			t.Errorf("no NetworkNotReady event for the stuck pod")
		}
	})

	t.Run("exec and probe work from hostNetwork pods", func(t *testing.T) {
		s.Apply(hostPod("h2", "node2", 8080) + "---\n" + hostPod("h3", "node3", 9090))
		waitRunning(t, s, "default", "h2")
		waitRunning(t, s, "default", "h3")
		node2, node3 := state.Nodes[1].IPs[0], state.Nodes[2].IPs[0]
		out, err := s.Run("exec", "default/h2", "--", "ip", "-o", "addr", "show", "dev", "br-ex")
		if err != nil || !strings.Contains(out, node2+"/") {
			t.Errorf("exec in hostNetwork pod h2: %q (err %v), want node2's address %s", out, err, node2)
		}
		for _, proto := range []string{"tcp", "udp", "sctp"} {
			out, err := s.Run("probe", "default/h2", node3+":9090/"+proto)
			want := "responder default/h3 saw source " + node2
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("probe h2 -> h3 %s: %q (err %v), want %q", proto, out, err, want)
			}
		}
	})

	t.Run("deleting a pod removes its sandbox and its CNI attachment", func(t *testing.T) {
		b, err := s.Client.CoreV1().Pods("default").Get(ctx, "web-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := s.Kubectl("delete", "pod", "web-b", "--wait=true", "--timeout=60s"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		nsPath := filepath.Join("/run/netns", s.Layout.PodNetNS("node1", string(b.UID)))
		framework.Eventually(t, 10*time.Second, "web-b's namespace and address to be released", func() error {
			if _, err := os.Stat(nsPath); err == nil {
				return fmt.Errorf("%s still exists", nsPath)
			}
			ipFile := filepath.Join(s.Layout.NodeDir("node1"), "ipam", "testnet", b.Status.PodIP)
			if _, err := os.Stat(ipFile); err == nil {
				return fmt.Errorf("host-local still holds %s: CNI DEL was not called", b.Status.PodIP)
			}
			return nil
		})
	})

	t.Run("down leaves nothing behind", func(t *testing.T) {
		if out, err := s.Run("down"); err != nil {
			t.Fatalf("down: %v\n%s", err, out)
		}
		ports := []int{state.EtcdPort, state.EtcdPeerPort, state.APIServerPort}
		if left := framework.Leftovers(s.Layout, before, ports); len(left) > 0 {
			t.Fatalf("left behind after down:\n  %s", strings.Join(left, "\n  "))
		}
	})
}

// TestDownAfterCrashedUp kills `up` midway (its processes and namespaces half made) and
// checks that down still removes everything.
func TestDownAfterCrashedUp(t *testing.T) {
	env := framework.Require(t)
	before := framework.TakeFootprint()
	s := framework.New(t, env, framework.UniqueName())
	t.Cleanup(func() { _, _ = s.Run("down") })
	up := s.Command("up", "--nodes", "3", "--network", "none")
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	midway := filepath.Join(s.Layout.PidDir(), "node2-ovs-vswitchd.pid")
	framework.Eventually(t, 60*time.Second, "up to reach node2", func() error {
		_, err := os.Stat(midway)
		return err
	})
	if err := up.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = up.Wait()
	state, err := s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Layout.NetNamespaces()) == 0 || len(s.Layout.OwnedPIDs()) == 0 {
		t.Fatalf("the killed up left no namespaces or processes: the test proves nothing")
	}
	if out, err := s.Run("down"); err != nil {
		t.Fatalf("down after a crashed up: %v\n%s", err, out)
	}
	ports := []int{state.EtcdPort, state.EtcdPeerPort, state.APIServerPort}
	if left := framework.Leftovers(s.Layout, before, ports); len(left) > 0 {
		t.Fatalf("left behind after down:\n  %s", strings.Join(left, "\n  "))
	}
}

// TestDualStackNodes checks a dual-stack sandbox: nodes carry both families and hostNetwork
// pods reach each other over IPv6 across the underlay.
func TestDualStackNodes(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "2", "--ip-family", "dual", "--network", "none")
	state, err := s.Layout.LoadState()
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := state.Nodes[0], state.Nodes[1]
	if len(n1.IPs) != 2 {
		t.Fatalf("dual-stack node has addresses %v", n1.IPs)
	}
	s.Apply(hostPod("h1", "node1", 7070) + "---\n" + hostPod("h2", "node2", 7070))
	waitRunning(t, s, "default", "h1")
	p := waitRunning(t, s, "default", "h2")
	if len(p.Status.PodIPs) != 2 {
		t.Errorf("hostNetwork pod IPs %v, want both families", p.Status.PodIPs)
	}
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		out, err := s.Run("probe", "default/h1", "["+n2.IPs[1]+"]:7070/"+proto)
		want := "responder default/h2 saw source " + n1.IPs[1]
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("IPv6 probe h1 -> h2 %s: %q (err %v), want %q", proto, out, err, want)
		}
	}
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func waitRunning(t *testing.T, s *framework.Sandbox, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	framework.Eventually(t, 60*time.Second, ns+"/"+name+" Running and Ready", func() error {
		p, err := s.Client.CoreV1().Pods(ns).Get(framework.Context(t), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, IP %q, conditions %+v", p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
		}
		pod = p
		return nil
	})
	return pod
}

func pod(ns, name, node string, hostNetwork bool) string {
	spec := map[string]any{"containers": []any{map[string]any{"name": "c", "image": "responder"}}}
	if node != "" {
		spec["nodeName"] = node
	}
	if hostNetwork {
		spec["hostNetwork"] = true
	}
	return manifest(ns, name, spec)
}

func hostPod(name, node string, port int) string {
	ports := []any{}
	for _, proto := range []string{"TCP", "UDP", "SCTP"} {
		ports = append(ports, map[string]any{"containerPort": port, "protocol": proto})
	}
	return manifest("default", name, map[string]any{
		"nodeName": node, "hostNetwork": true,
		"containers": []any{map[string]any{"name": "c", "image": "responder", "ports": ports}},
	})
}

func manifest(ns, name string, spec map[string]any) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec})
	return string(b) + "\n"
}

// installBridgePlugin builds the reference bridge and host-local CNI plugins and installs
// them with a conflist on one node, as an operator installs a network plugin.
func installBridgePlugin(t *testing.T, binDir, confDir, nodeDir string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", binDir+"/",
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build reference CNI plugins: %v\n%s", err, out)
	}
	conf := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "testnet", "plugins": [{"type": "bridge", "bridge": "cni0",
  "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.1.0/24"}]], "dataDir": %q}}]}`,
		filepath.Join(nodeDir, "ipam"))
	if err := os.WriteFile(filepath.Join(confDir, "10-testnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}
