package framework

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// PodSpec describes a test pod.
type PodSpec struct {
	Namespace, Name, Node string
	HostNetwork           bool
	Labels                map[string]string
	Annotations           map[string]string
	Ports                 []corev1.ContainerPort
}

// CreatePod creates a pod bound to its node (no scheduler involved).
func (s *Sandbox) CreatePod(t testing.TB, p PodSpec) {
	t.Helper()
	ctx := context.Background()
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	s.EnsureNamespace(t, p.Namespace, nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations},
		Spec: corev1.PodSpec{NodeName: p.Node, HostNetwork: p.HostNetwork,
			Containers: []corev1.Container{{Name: "responder", Image: "kovs/responder", Ports: p.Ports}}},
	}
	if _, err := s.Client.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// EnsureNamespace creates a namespace if it does not exist.
func (s *Sandbox) EnsureNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := s.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// WaitRunning waits until the pod runs with its IPs and returns it.
func (s *Sandbox) WaitRunning(t testing.TB, namespace, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	Eventually(t, timeout, namespace+"/"+name+" Running", func() error {
		p, err := s.Client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) == 0 {
			return fmt.Errorf("phase %s, IPs %v, conditions %+v", p.Status.Phase, p.Status.PodIPs, p.Status.Conditions)
		}
		pod = p
		return nil
	})
	return pod
}

// DeletePod deletes a pod and waits until it is gone.
func (s *Sandbox) DeletePod(t testing.TB, namespace, name string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := s.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s/%s: %v", namespace, name, err)
	}
	Eventually(t, timeout, namespace+"/"+name+" gone", func() error {
		_, err := s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

// PodIPs returns the pod's status IPs.
func PodIPs(p *corev1.Pod) []netip.Addr {
	var ips []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			ips = append(ips, a)
		}
	}
	return ips
}

// NetNSPath is the network namespace a pod runs in.
func (s *Sandbox) NetNSPath(p *corev1.Pod) string {
	if p.Spec.HostNetwork {
		return sandbox.NetNSPath(s.Layout.NodeNetNS(p.Spec.NodeName))
	}
	return sandbox.NetNSPath(s.Layout.PodNetNS(p.Spec.NodeName, string(p.UID)))
}

// Probe connects from inside the pod to addr:port/proto.
func (s *Sandbox) Probe(from *corev1.Pod, addr netip.Addr, port string, timeout time.Duration) responder.Result {
	return s.ProbeFromPort(from, addr, port, 0, timeout)
}

// ProbeFromPort is Probe from source port src (0: any, as Probe).
func (s *Sandbox) ProbeFromPort(from *corev1.Pod, addr netip.Addr, port string, src uint16, timeout time.Duration) responder.Result {
	p, err := responder.ParsePort(port)
	if err != nil {
		return responder.Result{Error: err.Error()}
	}
	target := responder.Target{Addr: addr, Port: p}
	var res responder.Result
	err = ns.WithNetNSPath(s.NetNSPath(from), func(ns.NetNS) error {
		if src == 0 {
			res = responder.Probe(context.Background(), target, timeout)
		} else {
			res = responder.ProbeFromPort(context.Background(), target, src, timeout)
		}
		return nil
	})
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

// Exec runs a command in the pod's network namespace and returns its output.
func (s *Sandbox) Exec(p *corev1.Pod, cmd ...string) (string, error) {
	return s.Run(append([]string{"exec", p.Namespace + "/" + p.Name, "--"}, cmd...)...)
}

// NodeOVS returns ovs-vsctl / ovs-ofctl style arguments for a node's OVS.
func (s *Sandbox) OVSDB(node string) string { return "unix:" + s.Layout.OVSDBSocket(node) }

// BrIntTarget is the ovs-ofctl target of a node's br-int.
func (s *Sandbox) BrIntTarget(node string) string {
	return "unix:" + s.Layout.OVSDir(node) + "/br-int.mgmt"
}

// Describe is a short text of a probe result for failure messages.
func Describe(r responder.Result) string {
	switch {
	case r.Connected && r.Reply != nil:
		return "connected, responder " + r.Reply.Identity + " saw " + r.Reply.Peer.Addr().String()
	case r.Connected:
		return "connected without a line: " + r.Error
	case r.Refused:
		return "refused: " + r.Error
	}
	return "no answer: " + strings.TrimSpace(r.Error)
}

// WaitNodesReady waits until every Node is Ready (kovs has set up its network).
func (s *Sandbox) WaitNodesReady(t testing.TB) {
	t.Helper()
	Eventually(t, 90*time.Second, "all nodes Ready with kovs", func() error {
		list, err := s.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return fmt.Errorf("node %s: %s", n.Name, c.Message)
				}
			}
		}
		return nil
	})
}
