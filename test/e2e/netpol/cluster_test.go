package netpol_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// modelCluster is the standard model running in a sandbox.
type modelCluster struct {
	s    *framework.Sandbox
	pods []*corev1.Pod
	// services, when set, gives every pod a ClusterIP Service and probes go through it
	// (service_mode_test.go).
	services *serviceMode
}

const probeTimeout = time.Second

func newModelCluster(t *testing.T, s *framework.Sandbox, model []ModelPod) *modelCluster {
	m := &modelCluster{s: s}
	for _, ns := range modelNamespaces {
		s.EnsureNamespace(t, ns, map[string]string{"ns": ns})
	}
	m.pods = m.createPods(t, model)
	return m
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
	for ns, labels := range c.ExtraNamespaces {
		m.s.EnsureNamespace(t, ns, labels)
	}
	extra := c.ExtraPods
	for i := range extra {
		if extra[i].Node == "" {
			extra[i].Node = fmt.Sprintf("node%d", i%3+1)
		}
	}
	return m.createPods(t, extra)
}

// applyStep makes the step's changes.
func (m *modelCluster) applyStep(t *testing.T, step Step) {
	ctx := context.Background()
	for _, doc := range splitYAML(step.Apply) {
		doc, err := expandAddresses(doc, m.podAddress)
		if err != nil {
			t.Fatalf("policy YAML: %v\n%s", err, doc)
		}
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			t.Fatalf("policy YAML: %v\n%s", err, doc)
		}
		if np.Namespace == "" {
			t.Fatalf("policy %s has no namespace", np.Name)
		}
		c := m.s.Client.NetworkingV1().NetworkPolicies(np.Namespace)
		old, err := c.Get(ctx, np.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = c.Create(ctx, &np, metav1.CreateOptions{})
		case err == nil:
			np.ResourceVersion = old.ResourceVersion
			_, err = c.Update(ctx, &np, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("apply policy %s/%s: %v", np.Namespace, np.Name, err)
		}
	}
	for _, key := range step.Delete {
		ns, name, _ := strings.Cut(key, "/")
		if err := m.s.Client.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete policy %s: %v", key, err)
		}
	}
	for key, labels := range step.PodLabels {
		ns, name, _ := strings.Cut(key, "/")
		patchLabels(t, func(p []byte) error {
			_, err := m.s.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		}, labels, m.currentLabels(t, ns, name))
	}
	for ns, labels := range step.NamespaceLabels {
		cur, err := m.s.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patchLabels(t, func(p []byte) error {
			_, err := m.s.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		}, labels, cur.Labels)
	}
}

// podAddress is the first address of a running pod, for expandAddresses.
func (m *modelCluster) podAddress(key string) (netip.Addr, error) {
	ns, name, _ := strings.Cut(key, "/")
	p, err := m.s.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	a, ok := firstIP(p)
	if !ok {
		return netip.Addr{}, fmt.Errorf("pod %s has no address", key)
	}
	return a, nil
}

func (m *modelCluster) currentLabels(t *testing.T, ns, name string) map[string]string {
	p, err := m.s.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels
}

// patchLabels replaces a label set: keys not in want are removed.
func patchLabels(t *testing.T, patch func([]byte) error, want, current map[string]string) {
	labels := map[string]any{}
	for k := range current {
		labels[k] = nil
	}
	for k, v := range want {
		labels[k] = v
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err := patch(b); err != nil {
		t.Fatalf("patch labels: %v", err)
	}
}

// reset deletes every NetworkPolicy and the case's extras, and restores the labels.
func (m *modelCluster) reset(t *testing.T, c Case) {
	ctx := context.Background()
	for _, ns := range append(append([]string{}, modelNamespaces...), mapKeys(c.ExtraNamespaces)...) {
		_ = m.s.Client.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	for _, p := range c.ExtraPods {
		m.s.DeletePod(t, p.Namespace, p.Name, 60*time.Second)
	}
	for ns := range c.ExtraNamespaces {
		_ = m.s.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}
	for _, p := range standardPods() {
		m.applyStep(t, Step{PodLabels: map[string]map[string]string{p.Key(): p.Labels}})
	}
	for _, ns := range modelNamespaces {
		m.applyStep(t, Step{NamespaceLabels: map[string]map[string]string{ns: {"ns": ns}}})
	}
}

// probe probes every ordered pair on every port, many at a time.
func (m *modelCluster) probe(t *testing.T, pods []*corev1.Pod, ports []string) matrix {
	got := matrix{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	// The maps are all made before any probe starts: the probes write into them
	// concurrently (under mu), and a map must not be written while another goroutine
	// reads it.
	for _, port := range ports {
		got[port] = map[string]map[string]bool{}
		for _, from := range pods {
			got[port][key(from)] = map[string]bool{}
		}
	}
	for _, port := range ports {
		for _, from := range pods {
			for _, to := range pods {
				dst, ok := m.destination(to)
				if !ok {
					t.Fatalf("pod %s has no address", key(to))
				}
				wg.Add(1)
				sem <- struct{}{}
				go func(port string, from, to *corev1.Pod) {
					defer wg.Done()
					defer func() { <-sem }()
					r := m.s.Probe(from, dst, port, probeTimeout)
					mu.Lock()
					got[port][key(from)][key(to)] = r.Connected
					mu.Unlock()
				}(port, from, to)
			}
		}
	}
	wg.Wait()
	return got
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func firstIP(p *corev1.Pod) (netip.Addr, bool) {
	ips := framework.PodIPs(p)
	if len(ips) == 0 {
		return netip.Addr{}, false
	}
	return ips[0], true
}

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
