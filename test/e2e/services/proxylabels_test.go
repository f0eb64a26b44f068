package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/agent"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// testProxyLabels: kovs leaves alone, as kube-proxy does, a Service labelled
// service.kubernetes.io/headless or service.kubernetes.io/service-proxy-name (whatever
// the value), serves it once the label is removed, and stops serving a Service that gains
// the label (the upstream "should implement service.kubernetes.io/headless" and
// "service-proxy-name" tests).
//
// A Service kovs serves has a ServiceLB flow matching its ClusterIP on every node, so
// "not served" is read positively from br-int: no flow matches the labelled ClusterIP.
// The labelled Services are created before a plain one and come through the same watch,
// in order: once a node's br-int load-balances the plain one, its agent has seen the
// labelled ones too.
func (c *svcCluster) testProxyLabels(t *testing.T) {
	ns := c.namespace(t, "proxylabels")
	pods := c.createPods(t, framework.PodSpec{Namespace: ns, Name: "pl", Node: "node2", Labels: map[string]string{"app": "pl"},
		Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}})
	ports := []corev1.ServicePort{svcPort("http", 80, intstr.FromInt32(8080), corev1.ProtocolTCP)}
	labelled := func(key, value string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Labels = map[string]string{key: value} }
	}
	headless := c.service(t, ns, "headless", map[string]string{"app": "pl"}, ports, labelled(corev1.IsHeadlessService, ""))
	other := c.service(t, ns, "other-proxy", map[string]string{"app": "pl"}, ports, labelled(agent.LabelServiceProxyName, "foo-bar"))
	plain := c.service(t, ns, "plain", map[string]string{"app": "pl"}, ports, nil)
	for _, svc := range []*corev1.Service{headless, other, plain} {
		c.s.WaitEndpoints(t, ns, svc.Name, podNames(pods), programTimeout)
	}
	from := c.client("node1")
	ipOf := func(s *corev1.Service) netip.Addr { return framework.ClusterIPs(s)[0] }
	c.waitAnswered(t, from, ipOf(plain), "80/tcp", "the unlabelled Service")
	for _, node := range nodeNames {
		framework.Eventually(t, programTimeout, node+"'s br-int to load-balance the unlabelled Service", func() error {
			if c.notServed(t, node, ipOf(plain)) == nil {
				return fmt.Errorf("no flow matches %s", ipOf(plain))
			}
			return nil
		})
		for _, svc := range []*corev1.Service{headless, other} {
			if err := c.notServed(t, node, ipOf(svc)); err != nil {
				t.Errorf("Service %s labelled %v: %v", svc.Name, svc.Labels, err)
			}
		}
	}

	c.setLabel(t, plain, corev1.IsHeadlessService, ptr.To(""))
	framework.Eventually(t, programTimeout, "kovs to stop serving a Service that gained "+corev1.IsHeadlessService, func() error {
		for _, node := range nodeNames {
			if err := c.notServed(t, node, ipOf(plain)); err != nil {
				return err
			}
		}
		return nil
	})

	c.setLabel(t, headless, corev1.IsHeadlessService, nil)
	c.setLabel(t, other, agent.LabelServiceProxyName, nil)
	for _, svc := range []*corev1.Service{headless, other} {
		r := c.waitAnswered(t, from, ipOf(svc), "80/tcp", "Service "+svc.Name+" once its label is removed")
		if r.Reply.Identity != key(pods[0]) {
			t.Errorf("%s answered by %s, want %s", svc.Name, r.Reply.Identity, key(pods[0]))
		}
	}
}

// notServed says which of node's br-int flows match ClusterIP ip as a destination, if any.
func (c *svcCluster) notServed(t *testing.T, node string, ip netip.Addr) error {
	for _, f := range c.s.DumpFlows(t, node) {
		if mentions(f.Text, ip) {
			return fmt.Errorf("%s's br-int load-balances %s: %s", node, ip, f.Text)
		}
	}
	return nil
}

// setLabel sets (value non-nil) or removes (nil) one label of a Service.
func (c *svcCluster) setLabel(t *testing.T, svc *corev1.Service, key string, value *string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.s.Client.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("label %s of Service %s/%s: %v", key, svc.Namespace, svc.Name, err)
	}
}
