package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// drainProbes new connections must all miss a backend that left the Service.
const drainProbes = 40

// openSession opens a long-lived TCP session through the ClusterIP and checks it echoes.
func (c *svcCluster) openSession(t *testing.T, from framework.Client, ip netip.Addr) *responder.Session {
	t.Helper()
	c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP")
	sess, err := c.s.DialFrom(from, ip, "80/tcp", probeTimeout)
	if err != nil {
		t.Fatalf("session to %s: %v", target(ip, "80/tcp"), err)
	}
	t.Cleanup(func() { sess.Close() })
	if err := sess.Echo(probeTimeout); err != nil {
		t.Fatalf("session to %s through %s: %v", sess.Reply.Identity, target(ip, "80/tcp"), err)
	}
	return sess
}

// checkDrained waits until new connections no longer reach gone, then checks that
// drainProbes more miss it and that the established session to it still carries data.
func (c *svcCluster) checkDrained(t *testing.T, from framework.Client, ip netip.Addr, gone string, rest []string,
	sess *responder.Session, why string) {
	t.Helper()
	framework.Eventually(t, programTimeout, "new connections to stop reaching "+why+" endpoint "+gone, func() error {
		return onlyFrom(c.s.Spread(from, ip, "80/tcp", 10, probeTimeout), rest...)
	})
	if err := onlyFrom(c.s.Spread(from, ip, "80/tcp", drainProbes, probeTimeout), rest...); err != nil {
		t.Errorf("new connections after %s endpoint %s left: %v", why, gone, err)
	}
	for i := range 3 {
		if err := sess.Echo(probeTimeout); err != nil {
			t.Errorf("established connection to the %s endpoint %s broke (echo %d after it left): %v", why, gone, i+1, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// testRemovedEndpoint: kube-controller-manager removes a backend from the Service's
// EndpointSlice when its label no longer matches; new connections avoid it, the one
// already open to it keeps working.
func (c *svcCluster) testRemovedEndpoint(t *testing.T) {
	ns := c.namespace(t, "removed")
	labels := map[string]string{"app": "rm"}
	ports := []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	pods := c.createPods(t,
		framework.PodSpec{Namespace: ns, Name: "rm-1", Node: "node1", Labels: labels, Ports: ports},
		framework.PodSpec{Namespace: ns, Name: "rm-2", Node: "node2", Labels: labels, Ports: ports})
	svc := c.service(t, ns, "rm", labels, []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)}, nil)
	c.s.WaitEndpoints(t, ns, "rm", podNames(pods), programTimeout)
	ip := framework.ClusterIPs(svc)[0]
	from := c.client("node3")
	sess := c.openSession(t, from, ip)
	gone, rest := splitBackends(t, pods, sess.Reply.Identity)
	t.Logf("session established to %s; removing it from the Service (label app=rm dropped)", key(gone))
	patch := []byte(`{"metadata":{"labels":{"app":"gone"}}}`)
	if _, err := c.s.Client.CoreV1().Pods(ns).Patch(context.Background(), gone.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.s.WaitEndpoints(t, ns, "rm", []string{rest.Name}, programTimeout)
	c.checkDrained(t, from, ip, key(gone), []string{key(rest)}, sess, "removed")
}

// testNotReadyEndpoint: an endpoint whose EndpointSlice condition turns ready=false (the
// sandbox's node emulator always reports pods Ready, so the Service is selector-less with
// a hand-written slice, as kube-controller-manager would write it for a failing readiness
// probe) gets no new connections; the one already open keeps working.
func (c *svcCluster) testNotReadyEndpoint(t *testing.T) {
	svc, write := c.handSlicedService(t, "notready")
	ip := framework.ClusterIPs(svc)[0]
	web1, web2 := framework.ReadyEndpoint(c.web[0], ip), framework.ReadyEndpoint(c.web[1], ip)
	write(web1, web2)
	from := c.client("node3")
	sess := c.openSession(t, from, ip)
	gone, rest := splitBackends(t, c.web[:2], sess.Reply.Identity)
	t.Logf("session established to %s; marking it not ready", key(gone))
	notReady := func(e framework.SliceEndpoint) framework.SliceEndpoint {
		if e.Pod == gone {
			e.Ready, e.Serving, e.Terminating = false, false, false
		}
		return e
	}
	write(notReady(web1), notReady(web2))
	c.checkDrained(t, from, ip, key(gone), []string{key(rest)}, sess, "not-ready")
}

// testTerminatingFallback: the upstream rule (KEP-1669): terminating endpoints that are
// still serving get traffic only when the Service has no ready endpoint; terminating and
// not serving, never.
func (c *svcCluster) testTerminatingFallback(t *testing.T) {
	svc, write := c.handSlicedService(t, "terminating")
	ip := framework.ClusterIPs(svc)[0]
	from := c.client("node3")
	ready := framework.ReadyEndpoint(c.web[0], ip)
	term := framework.ReadyEndpoint(c.web[1], ip)
	term.Ready, term.Serving, term.Terminating = false, true, true

	write(ready, term)
	c.waitAnswered(t, from, ip, "80/tcp", "ClusterIP with one ready and one terminating endpoint")
	framework.Eventually(t, programTimeout, "only the ready endpoint to answer", func() error {
		return onlyFrom(c.s.Spread(from, ip, "80/tcp", 10, probeTimeout), key(c.web[0]))
	})
	if err := onlyFrom(c.s.Spread(from, ip, "80/tcp", drainProbes, probeTimeout), key(c.web[0])); err != nil {
		t.Errorf("a terminating endpoint got traffic while a ready one exists: %v", err)
	}

	notReady := ready
	notReady.Ready, notReady.Serving = false, false
	write(notReady, term)
	framework.Eventually(t, programTimeout, "the serving terminating endpoint to take over when no endpoint is ready", func() error {
		return onlyFrom(c.s.Spread(from, ip, "80/tcp", 10, probeTimeout), key(c.web[1]))
	})

	term.Serving = false
	write(notReady, term)
	framework.Eventually(t, programTimeout, "a Service whose only endpoints are not ready and not serving to reject", func() error {
		r := c.s.ProbeFrom(from, ip, "80/tcp", probeTimeout)
		if r.Connected {
			return fmt.Errorf("connected to %s: %s", target(ip, "80/tcp"), framework.Describe(r))
		}
		if !r.Refused {
			return fmt.Errorf("not refused: %s", framework.Describe(r))
		}
		return nil
	})
}

// handSlicedService makes a selector-less ClusterIP Service (80/tcp to 8080) in its own
// namespace and returns a function that writes its one EndpointSlice.
func (c *svcCluster) handSlicedService(t *testing.T, name string) (*corev1.Service, func(...framework.SliceEndpoint)) {
	ns := c.namespace(t, name)
	svc := c.service(t, ns, name, nil, []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)}, nil)
	ports := []discoveryv1.EndpointPort{framework.EndpointPort("http", 8080, corev1.ProtocolTCP)}
	return svc, func(eps ...framework.SliceEndpoint) {
		c.s.ApplyEndpointSlice(t, framework.EndpointSliceFor(svc, name+"-1", ports, eps))
	}
}

// splitBackends returns the pod of two named by identity, and the other one.
func splitBackends(t *testing.T, pods []*corev1.Pod, identity string) (gone, rest *corev1.Pod) {
	t.Helper()
	switch identity {
	case key(pods[0]):
		return pods[0], pods[1]
	case key(pods[1]):
		return pods[1], pods[0]
	}
	t.Fatalf("the session was answered by %s, not a backend of the Service (%s, %s)", identity, key(pods[0]), key(pods[1]))
	return nil, nil
}
