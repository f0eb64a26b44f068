package podnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkForgedAnnotation is the tenant's attack on addresses (issue 14), as it stands since
// addresses are the node agents' (issue 26): a copy of pod b's kovs.io/pod-network record
// (the annotation releases before 2026-12 wrote, which they trusted) on a new pod of b's
// node. Nothing reads it now, so nothing guards it: the tenant creates the pod, and the
// pod runs with an address node1's agent allocated, never b's; c still reaches x/b at b's
// address, and no two pods share one. The pod is created while kovs-controller is
// stopped: a pod's start needs no controller (its address is the node's), and it runs
// closed until its policy is known.
func (c *cluster) checkForgedAnnotation(t *testing.T) {
	ctx := context.Background()
	b := c.pods["b"]
	bIPs := framework.PodIPs(b)
	if len(bIPs) == 0 {
		t.Fatalf("pod b has no IPs")
	}
	stolen := recordOf(t, b, bIPs)
	tenant := c.tenantClient(t, "x", "tenant")
	resume := c.s.Pause(t, "kovs-controller")
	defer resume()
	// The tenant's RoleBinding is in force once kube-apiserver's authorizer has seen it.
	framework.Eventually(t, 30*time.Second, "the tenant creates a pod carrying b's record", func() error {
		_, err := tenant.CoreV1().Pods("x").Create(ctx, forgedPod("forged-by-tenant", stolen), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource") {
			return err // RBAC not in force yet
		}
		if err != nil {
			t.Fatalf("the tenant could not create a pod (an annotation no one reads needs no guard): %v", err)
		}
		return nil
	})
	defer c.s.DeletePod(t, "x", "forged-by-tenant", podTimeout)
	// Past the agent's wait for the pod's policy (30 s), which cannot come while the
	// controller is stopped.
	running := c.s.WaitRunning(t, "x", "forged-by-tenant", podTimeout+30*time.Second)
	got := framework.PodIPs(running)
	if len(got) == 0 {
		t.Fatal("the forged pod runs without an address")
	}
	for _, ip := range got {
		if slices.Contains(bIPs, ip) {
			t.Errorf("the pod carrying b's record runs with b's address %s", ip)
		}
	}
	t.Logf("with kovs-controller stopped, the pod carrying b's record runs with %v (b has %v)", got, bIPs)
	resume()
	if r := c.s.Probe(c.pods["c"], bIPs[0], "80/tcp", probeTimeout); !r.Connected || r.Reply.Identity != "x/b" {
		t.Errorf("c -> b's address %s after the attack: %s", bIPs[0], framework.Describe(r))
	}
	framework.Eventually(t, podTimeout, "c -> the forged pod once its policy is known", func() error {
		if r := c.s.Probe(c.pods["c"], got[0], "80/tcp", probeTimeout); !r.Connected || r.Reply.Identity != "x/forged-by-tenant" {
			return fmt.Errorf("%s", framework.Describe(r))
		}
		return nil
	})
	c.checkNoSharedAddress(t)
}

// recordOf is pod p's addresses as a kovs.io/pod-network record of the old releases.
func recordOf(t *testing.T, p *corev1.Pod, ips []netip.Addr) string {
	t.Helper()
	var addrs []ipam.PodAddress
	for _, ip := range ips {
		bits := 24
		if ip.Is6() {
			bits = 64
		}
		block := netip.PrefixFrom(ip, bits).Masked()
		addrs = append(addrs, ipam.PodAddress{Address: netip.PrefixFrom(ip, bits), Gateway: ipam.BlockGateway(block)})
	}
	network, err := ipam.NewPodNetwork(addrs)
	if err != nil {
		t.Fatal(err)
	}
	network.UID = string(p.UID)
	record, err := network.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	return record
}

// checkNoSharedAddress: no two live pods of the cluster share an address.
func (c *cluster) checkNoSharedAddress(t *testing.T) {
	t.Helper()
	list, err := c.s.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[netip.Addr]string{}
	for _, p := range list.Items {
		if p.Spec.HostNetwork || p.DeletionTimestamp != nil {
			continue
		}
		for _, ip := range framework.PodIPs(&p) {
			if other, ok := owner[ip]; ok {
				t.Errorf("pods %s and %s/%s share address %s", other, p.Namespace, p.Name, ip)
			}
			owner[ip] = p.Namespace + "/" + p.Name
		}
	}
}

// tenantClient is a ServiceAccount of namespace ns with the edit role there, as a tenant
// who may create pods in its own namespace.
func (c *cluster) tenantClient(t *testing.T, ns, name string) kubernetes.Interface {
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
	_, err := c.s.Client.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return c.s.ServiceAccountClient(t, ns, name)
}

// forgedPod is a pod on node1 that carries record as its kovs.io/pod-network.
// An empty record leaves the pod without one.
func forgedPod(name, record string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name},
		Spec: corev1.PodSpec{NodeName: "node1",
			Containers: []corev1.Container{{Name: "responder", Image: "kovs/responder"}}},
	}
	if record != "" {
		p.Annotations = map[string]string{ipam.PodNetworkAnnotationKey: record}
	}
	return p
}
