package netpol_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/emulator"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestNoWindowBeforePolicy proves a new pod is never reachable before the policies that
// select it are in place. The test is the container runtime of the new pod: it creates
// the pod's namespace and starts the responder in it BEFORE calling CNI ADD; a client on
// another node hammers the pod's address from the moment node1's agent has allocated it
// (its OVS port, which carries the address, exists: before its flows and its policy are
// installed) until well after ADD returned. If kovs opened the pod before its policy
// flows were installed, some of those connections would get through. The same run
// against an unselected pod shows the prober would notice. No step waits for time: the
// run ends once the hammer's connections are seen reaching the attached pod minSigns
// times (answered by the open pod; dropped by the guarded pod's ingress default deny, its
// counter read on node1).
func TestNoWindowBeforePolicy(t *testing.T) {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3")
	ctx := context.Background()
	s.EnsureNamespace(t, "w", nil)
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "w", Name: "guard"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := s.Client.NetworkingV1().NetworkPolicies("w").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.CreatePod(t, framework.PodSpec{Namespace: "w", Name: "client", Node: "node2", Labels: map[string]string{"app": "client"}})
	client := s.WaitRunning(t, "w", "client", 60*time.Second)
	runtime := emulator.NewRuntime(s.Layout.CNIConfDir("node1"), s.Layout.CNIBinDir("node1"),
		s.Layout.CNICacheDir("node1"), sandbox.NetNSPath(s.Layout.NodeNetNS("node1")))
	framework.Eventually(t, 60*time.Second, "kovs CNI on node1 ready", func() error { return runtime.Ready(ctx) })

	for _, tc := range []struct {
		name        string
		wantReached bool
	}{{"guarded", false}, {"open", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := createExternalPod(t, s, tc.name, map[string]string{"app": tc.name})
			netns := newNetNS(t)
			startResponder(t, netns, tc.name)
			att := emulator.PodAttachment(pod, netns)
			added := make(chan error, 1)
			go func() {
				_, err := runtime.Add(ctx, att)
				added <- err
			}()
			ip, err := waitPortAddress(s, "node1", att.ContainerID, added)
			if err != nil {
				t.Fatal(err)
			}
			h := startHammer(s, client, ip)
			if err := <-added; err != nil {
				h.stop()
				t.Fatalf("CNI ADD: %v", err)
			}
			t.Cleanup(func() { _ = runtime.Del(context.Background(), att) })
			// The run ends on a positive sign that the hammer's connections reached the
			// pod after ADD: the unselected pod answered many of them, or the guarded
			// pod's ingress default deny on node1 dropped many of their packets.
			if tc.wantReached {
				framework.Eventually(t, 30*time.Second, "the hammer connected to the unselected pod", func() error {
					if n := h.reached.Load(); n < minSigns {
						return fmt.Errorf("%d connections of %d wanted", n, minSigns)
					}
					return nil
				})
			} else {
				deny := s.PodDenyPackets("node1", "w", tc.name)
				framework.Eventually(t, 30*time.Second, "the guarded pod's ingress default deny dropping the hammer's packets", func() error {
					n, err := deny()
					if err == nil && n.Packets < minSigns {
						err = fmt.Errorf("%d packets dropped of %d wanted", n.Packets, minSigns)
					}
					return err
				})
			}
			attempts, reached := h.stop()
			t.Logf("%d connection attempts to %s (%s), from its port's creation during CNI ADD until %d signs after it; %d connected", attempts, tc.name, ip, minSigns, reached)
			if tc.wantReached && reached < minSigns {
				t.Fatalf("the prober reached the unselected pod %d times, want %d: it would not notice a window either", reached, minSigns)
			}
			if !tc.wantReached && reached > 0 {
				t.Fatalf("a denied client connected %d times to a pod its policy selects: a window before the policy", reached)
			}
		})
	}
}

// createExternalPod creates a pod on node1 that the node emulator leaves to the test.
func createExternalPod(t *testing.T, s *framework.Sandbox, name string, labels map[string]string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "w", Name: name, Labels: labels,
			Annotations: map[string]string{emulator.RuntimeAnnotation: emulator.RuntimeExternal}},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "responder", Image: "kovs/responder"}}},
	}
	created, err := s.Client.CoreV1().Pods("w").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = s.Client.CoreV1().Pods("w").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return created
}

// waitPortAddress returns the pod address the node's agent allocated to the sandbox, read
// from the sandbox's OVS port (kovs.io/ip-addresses) as soon as the port exists, which is
// before the pod's flows and policy are installed. It fails if ADD ends first.
func waitPortAddress(s *framework.Sandbox, node, sandboxID string, added chan error) (netip.Addr, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		port := cni.HostInterfaceName(sandboxID)
		out, err := exec.Command("ovs-vsctl", "--db="+s.OVSDB(node), "--if-exists", "get", "Interface", port,
			`external_ids:"kovs.io/ip-addresses"`).CombinedOutput()
		if err != nil {
			return netip.Addr{}, fmt.Errorf("ovs-vsctl get: %v: %s", err, out)
		}
		if value := strings.Trim(strings.TrimSpace(string(out)), `"`); value != "" {
			first, _, _ := strings.Cut(value, ",")
			prefix, err := netip.ParsePrefix(first)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("port %s of sandbox %s: address %q: %w", port, sandboxID, first, err)
			}
			return prefix.Addr(), nil
		}
		select {
		case err := <-added:
			added <- err
			return netip.Addr{}, fmt.Errorf("CNI ADD ended (%v) before the sandbox's port was seen", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return netip.Addr{}, fmt.Errorf("no OVS port of sandbox %s on %s after 30 s", sandboxID, node)
}

// newNetNS creates a pod namespace of the test's own, deleted at the end.
func newNetNS(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "kovs-nowin-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	return sandbox.NetNSPath(name)
}

// startResponder listens on 80/tcp in the namespace, before it has any interface.
func startResponder(t *testing.T, netnsPath, identity string) {
	var r *responder.Responder
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		r, err = responder.Serve(context.Background(), []responder.Port{{Number: 80, Protocol: responder.TCP}}, "w/"+identity)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
}

// minSigns is how many connections to the open pod, or packets dropped by the guarded
// pod's policy, end a run: the hammer is seen at work on the attached pod, many times.
const minSigns = 20

// hammerWorkers is how many connections the hammer has in flight.
const hammerWorkers = 8

// hammer opens a new TCP connection to an address every few milliseconds; attempts
// counts those that ended.
type hammer struct {
	done              chan struct{}
	wg                sync.WaitGroup
	attempts, reached atomic.Int64
}

func startHammer(s *framework.Sandbox, from *corev1.Pod, to netip.Addr) *hammer {
	h := &hammer{done: make(chan struct{})}
	for w := 0; w < hammerWorkers; w++ {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for {
				select {
				case <-h.done:
					return
				default:
				}
				if r := s.Probe(from, to, "80/tcp", 200*time.Millisecond); r.Connected {
					h.reached.Add(1)
				}
				h.attempts.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return h
}

func (h *hammer) stop() (attempts, reached int64) {
	close(h.done)
	h.wg.Wait()
	return h.attempts.Load(), h.reached.Load()
}
