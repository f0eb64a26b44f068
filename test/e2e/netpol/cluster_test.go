package netpol_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/test/e2e/framework"
	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

// modelCluster is the standard model running in a sandbox.
type modelCluster struct {
	s        *framework.Sandbox
	family   string
	families []bool // the address families probed: IPv6 or not
	pods     []*corev1.Pod
	// namespaces are the namespaces the model reads: the standard ones and the case's.
	namespaces []string
	// services, when set, gives every pod a ClusterIP Service and probes go through it
	// (service_mode_test.go).
	services *serviceMode
	// barriers counts the barrier policies made (realize_test.go).
	barriers int
	// ports are the source ports of the probes (probe_test.go).
	ports sourcePorts
	// slow counts the probes that connected, and those that answered late (probe_test.go).
	slow slowCells
	// broken says why the cluster can no longer run cases (a reset that did not return
	// it to the standard model); empty while it can.
	broken string
}

func newModelCluster(t *testing.T, s *framework.Sandbox, family string, model []ModelPod) *modelCluster {
	m := &modelCluster{s: s, family: family, families: familiesOf(family), namespaces: modelNamespaces}
	m.setUp(t, model)
	return m
}

// setUp creates the namespaces, the standard pods and the barrier pods.
func (m *modelCluster) setUp(t *testing.T, model []ModelPod) {
	for _, ns := range modelNamespaces {
		m.s.EnsureNamespace(t, ns, map[string]string{"ns": ns})
	}
	m.createBarrierPods(t)
	m.pods = m.createPods(t, model)
}

func (m *modelCluster) createPods(t *testing.T, model []ModelPod) []*corev1.Pod {
	for _, p := range model {
		m.s.CreatePod(t, framework.PodSpec{Namespace: p.Namespace, Name: p.Name, Node: p.Node, HostNetwork: p.HostNetwork,
			Labels: p.Labels, Ports: p.containerPorts()})
	}
	var pods []*corev1.Pod
	for _, p := range model {
		pods = append(pods, m.s.WaitRunning(t, p.Namespace, p.Name, 90*time.Second))
	}
	m.services.expose(t, pods)
	return pods
}

func (m *modelCluster) addExtras(t *testing.T, c Case) []*corev1.Pod {
	m.namespaces = append(append([]string{}, modelNamespaces...), sortedKeysOf(c.ExtraNamespaces)...)
	for _, ns := range sortedKeysOf(c.ExtraNamespaces) {
		m.s.EnsureNamespace(t, ns, c.ExtraNamespaces[ns])
	}
	return m.createPods(t, casePods(c)[len(m.pods):])
}

// perform makes one write of a step.
func (m *modelCluster) perform(t *testing.T, w write) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch {
	case w.policy != nil:
		c := m.s.Client.NetworkingV1().NetworkPolicies(w.policy.Namespace)
		np := w.policy.DeepCopy()
		old, gerr := c.Get(ctx, np.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			_, err = c.Create(ctx, np, metav1.CreateOptions{})
		case gerr == nil:
			np.ResourceVersion = old.ResourceVersion
			_, err = c.Update(ctx, np, metav1.UpdateOptions{})
		default:
			err = gerr
		}
	case w.deletePolicy != "":
		ns, name, _ := strings.Cut(w.deletePolicy, "/")
		err = m.s.Client.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case w.podLabels != "":
		ns, name, _ := strings.Cut(w.podLabels, "/")
		var p *corev1.Pod
		if p, err = m.s.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			err = patchLabels(func(b []byte) error {
				_, err := m.s.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
				return err
			}, w.labels, p.Labels)
		}
	default:
		var n *corev1.Namespace
		if n, err = m.s.Client.CoreV1().Namespaces().Get(ctx, w.nsLabels, metav1.GetOptions{}); err == nil {
			err = patchLabels(func(b []byte) error {
				_, err := m.s.Client.CoreV1().Namespaces().Patch(ctx, w.nsLabels, types.MergePatchType, b, metav1.PatchOptions{})
				return err
			}, w.labels, n.Labels)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", w, err)
	}
}

// podAddresses are a running pod's addresses, for expandAddresses.
func (m *modelCluster) podAddresses(key string) ([]netip.Addr, error) {
	ns, name, _ := strings.Cut(key, "/")
	p, err := m.s.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ips := framework.PodIPs(p)
	if len(ips) == 0 {
		return nil, fmt.Errorf("pod %s has no address", key)
	}
	return ips, nil
}

// patchLabels replaces a label set: keys not in want are removed (except
// kubernetes.io/metadata.name, which the API server keeps on every namespace).
func patchLabels(patch func([]byte) error, want, current map[string]string) error {
	labels := map[string]any{}
	for k := range current {
		if k != "kubernetes.io/metadata.name" {
			labels[k] = nil
		}
	}
	for k, v := range want {
		labels[k] = v
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	return patch(b)
}

// readCluster reads the namespaces of the model, their pods and their policies.
func (m *modelCluster) readCluster() (*policymodel.Cluster, error) {
	ctx := context.Background()
	c := &policymodel.Cluster{}
	for _, ns := range m.namespaces {
		n, err := m.s.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		c.Namespaces = append(c.Namespaces, *n)
		pods, err := m.s.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		c.Pods = append(c.Pods, pods.Items...)
		nps, err := m.s.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		c.Policies = append(c.Policies, nps.Items...)
	}
	return c, nil
}

// destination is where probes to pod go over a family: its address, or its Service's
// ClusterIP in service mode.
func (m *modelCluster) destination(to *corev1.Pod, ipv6 bool) (netip.Addr, error) {
	if m.services != nil {
		return m.services.clusterIP(to)
	}
	for _, a := range framework.PodIPs(to) {
		if a.Is6() == ipv6 {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod %s has no %s address", key(to), familyName(ipv6))
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func splitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split(s, "\n---") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// policiesIn lists the NetworkPolicies of a namespace.
func (m *modelCluster) policiesIn(ns string) ([]networkingv1.NetworkPolicy, error) {
	list, err := m.s.Client.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NetworkPolicies of %s: %w", ns, err)
	}
	return list.Items, nil
}
