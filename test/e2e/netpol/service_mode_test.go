package netpol_test

import (
	"context"
	"fmt"
	"net/netip"
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
// Run a subset with -run, for example 'TestTruthTableViaService/ipv4/(01|36)-'. The
// dual-stack cases run in direct mode only (TestNetworkPolicyTruthTable): a Service here
// has one ClusterIP, of the sandbox's family.
func TestTruthTableViaService(t *testing.T) {
	runTruthTable(t, newModelClusterViaService, "ipv4", "ipv6")
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
