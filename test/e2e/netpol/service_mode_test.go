package netpol_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestTruthTableViaService runs the truth-table cases with every probe sent to the
// destination pod's ClusterIP Service instead of its address, as the upstream
// NetworkPolicy e2e tests do: the matrix must be the same, since Service translation
// happens before policy and policy sees the real backend pod (issue 6).
//
// Every pod, standard or extra, gets its own Service svc-<pod> in its namespace, with one
// port per container port (same number and protocol) and one hand-written EndpointSlice
// holding that pod only. A selector would not do: cases relabel pods (x/b becomes pod=a in
// 36-pod-label-update), which would move pods between selector Services and change what a
// cell means. Each Service is checked to answer (no policy is in place when pods are
// created) before any case step runs, so a Service that does not work cannot pass for a
// denied cell. A pod reaching itself through its Service is hairpin traffic; the cases
// keep it allowed.
//
// SCTP probes go through the Services too, a pod's probe of itself included: on the
// userspace (netdev) datapath the sandbox runs, kovs translates SCTP Service ports
// statelessly, without conntrack (docs/services.md).
//
// make test runs the cases where a Service's translation meets policy (serviceCases);
// KOVS_TRUTH_TABLES=all (make truth-tables) runs every case. Run a subset with -run, for
// example 'TestTruthTableViaService/ipv4/(01|36)-'. The dual-stack cases run in direct mode
// only (TestNetworkPolicyTruthTable): a Service here has one ClusterIP, of the sandbox's
// family.
func TestTruthTableViaService(t *testing.T) {
	run := func(c Case) bool { return serviceCases[c.Name] != "" }
	if os.Getenv("KOVS_TRUTH_TABLES") == "all" {
		run = everyCase
	}
	runTruthTable(t, newModelClusterViaService, run, "ipv4", "ipv6")
}

// serviceCases are the cases TestTruthTableViaService runs in make test, each with what the
// Service's translation could get wrong there. The others differ only in which pods and
// namespaces their selectors pick: the translation happens before policy, so once the
// cases below hold (policy sees the backend pod, its port and protocol, in both
// directions), they add no Service-specific risk for their time (each ipv4 case costs
// about 12 s in a run of both modes' 29 minutes). TestCasesOfServiceModeExist keeps the names
// true to cases/.
var serviceCases = map[string]string{
	"01-default-deny-ingress":            "a ClusterIP does not bypass the backend's ingress isolation",
	"02-default-deny-egress":             "egress isolation applies to the translated destination",
	"04-allow-all-ingress":               "an allow rule matches the translated connection and its replies",
	"15-port-number":                     "ingress ports are matched on the target port, after translation",
	"16-named-port-ingress":              "a named port resolves on the backend pod",
	"18-named-port-egress":               "an egress named port resolves on the translated destination",
	"21-port-range-egress":               "an egress port range is matched on the target port",
	"23-udp-only":                        "UDP Service ports meet the protocol of the rule",
	"24-sctp-not-tcp":                    "SCTP Service ports (translated without conntrack) meet policy",
	"29-egress-denied-client-side":       "an egress deny happens on the client's node, after translation",
	"36-pod-label-update":                "a relabelled backend keeps its Service and meets its new policy",
	"42-self-traffic":                    "a pod reaching itself through its Service (hairpin) stays allowed",
	"45-ipblock-egress-pod":              "an egress ipBlock matches the backend's address, not the ClusterIP",
	"46-ipblock-egress-except":           "an ipBlock except is applied to the translated address",
	"47-ipblock-ingress":                 "an ingress ipBlock sees the client's address through the Service",
	"49-host-network-not-selected":       "hostNetwork clients through a Service",
	"53-named-port-egress-ipblocks":      "an egress named port through ipBlocks resolves on the backend",
	"60-ipv6-selectors-and-ports":        "IPv6 Services: selectors and ports",
	"61-ipv6-ipblock":                    "IPv6 Services: ipBlock on the backend's address",
	"62-ipv6-deny-all-and-labels":        "IPv6 Services: isolation and relabelling",
	"64-ipv6-named-port-egress-ipblocks": "IPv6 Services: egress named port through ipBlocks",
}

// TestCasesOfServiceModeExist: every case serviceCases names is in cases/, so a renamed case
// cannot silently leave make test.
func TestCasesOfServiceModeExist(t *testing.T) {
	cases, err := loadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, c := range cases {
		have[c.Name] = true
	}
	for name := range serviceCases {
		if !have[name] {
			t.Errorf("serviceCases names %s, which is not a case in cases/", name)
		}
	}
}

// newModelClusterViaService is newModelCluster in service mode.
func newModelClusterViaService(t *testing.T, s *framework.Sandbox, family string, model []ModelPod) *modelCluster {
	m := &modelCluster{s: s, family: family, families: familiesOf(family), namespaces: modelNamespaces,
		services: &serviceMode{s: s, byPod: map[string]exposed{}}}
	m.setUp(t, model)
	return m
}

// serviceMode keeps each pod's Service.
type serviceMode struct {
	s     *framework.Sandbox
	mu    sync.Mutex
	byPod map[string]exposed // by namespace/name
	// checkers are pods on the pod network that probe new Services.
	checkers []*corev1.Pod
}

// exposed is the Service of one pod incarnation.
type exposed struct {
	uid       string
	clusterIP netip.Addr
}

// serviceExposeTimeout bounds how long a new Service may take to answer.
const serviceExposeTimeout = 30 * time.Second

// clusterIP is the ClusterIP of the pod's Service.
func (sm *serviceMode) clusterIP(to *corev1.Pod) (netip.Addr, error) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	e, ok := sm.byPod[key(to)]
	if !ok || e.uid != string(to.UID) {
		return netip.Addr{}, fmt.Errorf("pod %s has no Service", key(to))
	}
	return e.clusterIP, nil
}

// expose gives each pod its Service (created, or its EndpointSlice rewritten for a new
// incarnation of the pod) and waits until each answers. A nil serviceMode does nothing.
func (sm *serviceMode) expose(t *testing.T, pods []*corev1.Pod) {
	if sm == nil {
		return
	}
	for _, p := range pods {
		ip := sm.ensureService(t, p)
		sm.mu.Lock()
		sm.byPod[key(p)] = exposed{uid: string(p.UID), clusterIP: ip}
		sm.mu.Unlock()
	}
	for _, p := range pods {
		if !p.Spec.HostNetwork && len(sm.checkers) < 2 {
			sm.checkers = append(sm.checkers, p)
		}
	}
	for _, p := range pods {
		sm.waitAnswers(t, p)
	}
}

// ensureService creates svc-<pod> if needed and writes its EndpointSlice; it returns the
// ClusterIP.
func (sm *serviceMode) ensureService(t *testing.T, p *corev1.Pod) netip.Addr {
	ctx := context.Background()
	name := "svc-" + p.Name
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name}}
	var slicePorts []discoveryv1.EndpointPort
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			portName := fmt.Sprintf("p-%d-%s", cp.ContainerPort, strings.ToLower(string(proto)))
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: portName, Port: cp.ContainerPort,
				TargetPort: intstr.FromInt32(cp.ContainerPort), Protocol: proto})
			slicePorts = append(slicePorts, framework.EndpointPort(portName, cp.ContainerPort, proto))
		}
	}
	if len(svc.Spec.Ports) == 0 {
		t.Fatalf("service mode: pod %s declares no container ports to expose", key(p))
	}
	got, err := sm.s.Client.CoreV1().Services(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err = sm.s.Client.CoreV1().Services(p.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("service mode: Service %s/%s: %v", p.Namespace, name, err)
	}
	clusterIP := framework.ClusterIPs(got)[0]
	ep := framework.ReadyEndpoint(p, clusterIP)
	sm.s.ApplyEndpointSlice(t, framework.EndpointSliceFor(got, name, slicePorts, []framework.SliceEndpoint{ep}))
	return clusterIP
}

// waitAnswers probes the pod's Service on every port from a checker pod other than the
// pod itself until the pod answers on each.
func (sm *serviceMode) waitAnswers(t *testing.T, p *corev1.Pod) {
	from := p
	for _, c := range sm.checkers {
		if key(c) != key(p) {
			from = c
			break
		}
	}
	sm.mu.Lock()
	dst := sm.byPod[key(p)].clusterIP
	sm.mu.Unlock()
	for _, port := range probePortsOf(p) {
		framework.Eventually(t, serviceExposeTimeout, fmt.Sprintf("service mode: %s's ClusterIP %s to answer %s from %s (no policy in place)",
			key(p), dst, port, key(from)), func() error {
			if o := classify(sm.s.Probe(from, dst, port, time.Second), key(p)); o.err != "" {
				return fmt.Errorf("%s", o.err)
			} else if !o.allowed {
				return fmt.Errorf("no answer")
			}
			return nil
		})
	}
}

// probePortsOf lists the pod's container ports as probes name them ("80/tcp").
func probePortsOf(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			proto := strings.ToLower(string(cp.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			out = append(out, fmt.Sprintf("%d/%s", cp.ContainerPort, proto))
		}
	}
	return out
}
