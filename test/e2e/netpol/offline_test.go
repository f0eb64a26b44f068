package netpol_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
	"github.com/kovs-net/kovs/test/e2e/netpol/refmodel"
)

// TestCasesAgreeWithModel checks every expectation of every case, offline, against the
// independent NetworkPolicy model (package policymodel): the cluster of the case (the
// standard pods and its extras, with addresses as the sandbox would allocate them: node
// k's pods in 10.244.(k-1).0/24 and fd00:10:244:(k-1)::/64, hostNetwork pods on the node
// address) goes through the case's steps, and after each step every cell the step probes
// must be what the case expects. A case that expects something the API does not say fails
// here before it ever runs against kovs.
func TestCasesAgreeWithModel(t *testing.T) {
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := refmodel.New()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cases {
		for _, family := range sandboxFamilies(c) {
			t.Run(family+"/"+c.Name, func(t *testing.T) {
				checked += checkCaseWithModel(t, c, family, ref)
			})
		}
	}
	t.Logf("%d cells checked against the model and the reference", checked)
}

// checkCaseWithModel runs one case through the model and returns the cells it checked.
// Every expectation is also judged by the reference (kube-network-policies' evaluator,
// package refmodel): a cell where the two models disagree fails, named with its case and
// step, whatever the case expects.
func checkCaseWithModel(t *testing.T, c Case, family string, ref *refmodel.Reference) int {
	cluster := offlineCluster(c, family)
	targets := offlineTargets(c)
	checked := 0
	for i, step := range c.Steps {
		writes, err := stepWrites(step, offlineAddrOf(cluster))
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		for _, w := range writes {
			if err := w.applyTo(cluster); err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
		}
		cells := cellsOf(step.Expect.ports(), familiesOf(family), targets)
		want := step.Expect.expected(cells)
		got, err := modelVerdicts(cluster, cells)
		if err != nil {
			t.Fatalf("step %d: the model cannot decide: %v", i+1, err)
		}
		var wrong []string
		for _, cell := range cells {
			if got[cell] != want[cell] {
				wrong = append(wrong, fmt.Sprintf("%s: the case expects allowed=%v, the API's semantics give %v", cell, want[cell], got[cell]))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("step %d: %d of %d expectations disagree with the NetworkPolicy model:\n  %s",
				i+1, len(wrong), len(cells), strings.Join(wrong, "\n  "))
		}
		if split := modelsDisagree(t, ref, cluster, cells, got); len(split) > 0 {
			t.Errorf("case %s (%s) step %d: kovs's model and kube-network-policies disagree on %d of %d cells:\n  %s",
				c.Name, family, i+1, len(split), len(cells), strings.Join(split, "\n  "))
		}
		if split := compilerDisagrees(t, cluster, cells, got); len(split) > 0 {
			t.Errorf("case %s (%s) step %d: kovs-controller's compiled shares and the models disagree on %d of %d cells:\n  %s",
				c.Name, family, i+1, len(split), len(cells), strings.Join(split, "\n  "))
		}
		checked += len(cells)
	}
	return checked
}

// sandboxFamilies lists the sandboxes a case runs in.
func sandboxFamilies(c Case) []string {
	f := c.Family
	if f == "" {
		f = "ipv4"
	}
	if c.DualStack && f != "dual" {
		return []string{f, "dual"}
	}
	return []string{f}
}

// casePods is the pods of a case: the standard ones and its extras, every extra placed on
// a node (the runner places them the same way).
func casePods(c Case) []ModelPod {
	pods := standardPods()
	for i, p := range c.ExtraPods {
		if p.Node == "" {
			p.Node = fmt.Sprintf("node%d", i%3+1)
		}
		pods = append(pods, p)
	}
	return pods
}

func offlineTargets(c Case) []target {
	var out []target
	for _, p := range casePods(c) {
		out = append(out, target{key: p.Key(), ports: p.containerPorts()})
	}
	return out
}

// offlineCluster is the case's cluster before its first step, with the addresses the
// sandbox would give its pods.
func offlineCluster(c Case, family string) *policymodel.Cluster {
	cl := &policymodel.Cluster{}
	for _, ns := range modelNamespaces {
		cl.Namespaces = append(cl.Namespaces, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"ns": ns}}})
	}
	for _, ns := range sortedKeysOf(c.ExtraNamespaces) {
		cl.Namespaces = append(cl.Namespaces, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: copyLabels(c.ExtraNamespaces[ns])}})
	}
	next := map[int]int{}
	for _, p := range casePods(c) {
		var node int
		fmt.Sscanf(p.Node, "node%d", &node)
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: copyLabels(p.Labels)},
			Spec: corev1.PodSpec{NodeName: p.Node, HostNetwork: p.HostNetwork,
				Containers: []corev1.Container{{Name: "responder", Ports: p.containerPorts()}}}}
		host := 10 + next[node]
		next[node]++
		for _, v6 := range familiesOf(family) {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: fakeAddress(node, host, v6, p.HostNetwork).String()})
		}
		cl.Pods = append(cl.Pods, pod)
	}
	return cl
}

// fakeAddress is pod number host of node's block, or the node's own address.
func fakeAddress(node, host int, v6, hostNetwork bool) netip.Addr {
	switch {
	case hostNetwork && v6:
		return netip.MustParseAddr(fmt.Sprintf("fd00:172:30::%x", node))
	case hostNetwork:
		return netip.MustParseAddr(fmt.Sprintf("172.30.0.%d", node))
	case v6:
		return netip.MustParseAddr(fmt.Sprintf("fd00:10:244:%x::%x", node-1, host))
	}
	return netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", node-1, host))
}

// offlineAddrOf resolves {{ip ...}} in policies from the offline cluster.
func offlineAddrOf(cl *policymodel.Cluster) func(string) ([]netip.Addr, error) {
	return func(key string) ([]netip.Addr, error) {
		for _, p := range cl.Pods {
			if p.Namespace+"/"+p.Name == key {
				var out []netip.Addr
				for _, ip := range p.Status.PodIPs {
					out = append(out, netip.MustParseAddr(ip.IP))
				}
				return out, nil
			}
		}
		return nil, fmt.Errorf("no pod %s", key)
	}
}

// modelsDisagree judges the cells with the reference on the cluster and returns, one line
// per cell, where its verdict is not got (kovs's model's). Cells between a node (a
// hostNetwork pod) and a pod on it, which the API always allows and the reference's
// evaluator cannot tell (refmodel.ErrNodeTraffic), are left to kovs's model.
func modelsDisagree(t *testing.T, ref *refmodel.Reference, cluster *policymodel.Cluster, cells []cellKey, got map[cellKey]bool) []string {
	t.Helper()
	if err := ref.Set(cluster); err != nil {
		t.Fatalf("reference: %v", err)
	}
	var split []string
	for _, cell := range cells {
		p, err := parseProbePort(cell.Port)
		if err != nil {
			t.Fatal(err)
		}
		verdict, err := ref.Allowed(policymodel.Connection{From: cell.From, To: cell.To, Protocol: p.protocol, Port: p.number, IPv6: cell.IPv6})
		if errors.Is(err, refmodel.ErrNodeTraffic) {
			continue
		}
		if err != nil {
			t.Fatalf("reference: %s: %v", cell, err)
		}
		if verdict != got[cell] {
			split = append(split, fmt.Sprintf("%s: kovs's model says allowed=%v, kube-network-policies says %v", cell, got[cell], verdict))
		}
	}
	return split
}

// compilerDisagrees compiles the cluster with kovs-controller's own compiler
// (networkpolicy.Compile, from scratch) and returns, one line per cell, where the
// compiled shares' meaning (policy.NodeShare's AllowsEgress and AllowsIngress, what the
// datapath implements) is not got: a misreading of the API in the compiler fails here,
// offline, before any sandbox runs. A pod's traffic to itself and a node's with its own
// pods are allowed by the datapath, not by shares, and left out.
func compilerDisagrees(t *testing.T, cluster *policymodel.Cluster, cells []cellKey, got map[cellKey]bool) []string {
	t.Helper()
	var namespaces []*corev1.Namespace
	for i := range cluster.Namespaces {
		ns := cluster.Namespaces[i].DeepCopy()
		ns.Labels = copyLabels(ns.Labels)
		ns.Labels[corev1.LabelMetadataName] = ns.Name // set by the API server
		namespaces = append(namespaces, ns)
	}
	pods := map[string]*corev1.Pod{}
	var podList []*corev1.Pod
	for i := range cluster.Pods {
		p := &cluster.Pods[i]
		pods[p.Namespace+"/"+p.Name] = p
		podList = append(podList, p)
	}
	var policies []*networkingv1.NetworkPolicy
	for i := range cluster.Policies {
		policies = append(policies, &cluster.Policies[i])
	}
	shares := networkpolicy.Compile(namespaces, podList, policies)
	addr := func(p *corev1.Pod, v6 bool) netip.Addr {
		for _, ip := range p.Status.PodIPs {
			if a := netip.MustParseAddr(ip.IP); a.Is6() == v6 {
				return a
			}
		}
		t.Fatalf("pod %s/%s has no address of the cell's family", p.Namespace, p.Name)
		return netip.Addr{}
	}
	var split []string
	for _, cell := range cells {
		src, dst := pods[cell.From], pods[cell.To]
		if cell.From == cell.To || ((src.Spec.HostNetwork || dst.Spec.HostNetwork) && src.Spec.NodeName == dst.Spec.NodeName) {
			continue
		}
		p, err := parseProbePort(cell.Port)
		if err != nil {
			t.Fatal(err)
		}
		proto := policy.Protocol(p.protocol)
		verdict := true
		if !src.Spec.HostNetwork {
			verdict = shares[src.Spec.NodeName].AllowsEgress(policy.PodKey{Namespace: src.Namespace, Name: src.Name},
				addr(dst, cell.IPv6), proto, p.number)
		}
		if verdict && !dst.Spec.HostNetwork {
			verdict = shares[dst.Spec.NodeName].AllowsIngress(policy.PodKey{Namespace: dst.Namespace, Name: dst.Name},
				addr(src, cell.IPv6), proto, p.number)
		}
		if verdict != got[cell] {
			split = append(split, fmt.Sprintf("%s: the models say allowed=%v, kovs-controller's shares %v", cell, got[cell], verdict))
		}
	}
	return split
}
