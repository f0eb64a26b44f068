package podnetwork_test

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkForgedAnnotation is the tenant's attack on addresses (issue 14): a copy of pod b's
// kovs.io/pod-network on a new pod of the same node, which would pass the spoof guard as
// b. A tenant (a ServiceAccount with the edit role in namespace x) can neither create a
// pod with it nor set it on a pod of its own: dist/'s admission policy lets only
// kovs-controller write it. Past admission (written as kovs-controller while the controller
// is stopped, so nothing corrects it), node1's agent refuses to plug b's address: not as a
// copy of b's record (another pod UID), not under the new pod's own UID (b's port holds
// the address). The pod never runs with b's address; once the controller runs again it
// gets an address of its own, and no two pods ever share one.
func (c *cluster) checkForgedAnnotation(t *testing.T) {
	ctx := context.Background()
	b := c.pods["b"]
	stolen := b.Annotations[ipam.PodNetworkAnnotationKey]
	bIPs := framework.PodIPs(b)
	if stolen == "" || len(bIPs) == 0 {
		t.Fatalf("pod b has no %s annotation or no IPs: %v", ipam.PodNetworkAnnotationKey, b.Annotations)
	}
	tenant := c.tenantClient(t, "x", "tenant")

	t.Run("tenant creates a pod with another pod's address", func(t *testing.T) {
		_, err := tenant.CoreV1().Pods("x").Create(ctx, forgedPod("forged-by-tenant", stolen), metav1.CreateOptions{})
		if err == nil {
			t.Errorf("the tenant created a pod carrying b's %s", ipam.PodNetworkAnnotationKey)
			c.s.DeletePod(t, "x", "forged-by-tenant", podTimeout)
			return
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), ipam.PodNetworkAnnotationKey) {
			t.Errorf("want a refusal by the admission policy naming %s, got: %v", ipam.PodNetworkAnnotationKey, err)
		}
	})
	t.Run("tenant sets another pod's address on its pod", func(t *testing.T) {
		a := c.pods["a"]
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipam.PodNetworkAnnotationKey: stolen}}})
		_, err := tenant.CoreV1().Pods("x").Patch(ctx, a.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			t.Errorf("the tenant set b's %s on pod a", ipam.PodNetworkAnnotationKey)
			c.restoreAnnotation(t, a)
			return
		}
		if !apierrors.IsForbidden(err) {
			t.Errorf("want a refusal by the admission policy, got: %v", err)
		}
	})
	t.Run("node1's agent refuses another pod's address", func(t *testing.T) {
		c.checkAgentRefusesStolenAddress(t, stolen, bIPs)
	})
	c.checkNoSharedAddress(t)
}

// checkAgentRefusesStolenAddress writes b's address on a new pod as kovs-controller would,
// with the controller stopped, and checks the pod never runs with it.
func (c *cluster) checkAgentRefusesStolenAddress(t *testing.T, stolen string, bIPs []netip.Addr) {
	ctx := context.Background()
	controller := c.s.ClientAs(t, framework.ControllerUser, "system:serviceaccounts", "system:serviceaccounts:kube-system")
	resume := c.s.Pause(t, "kovs-controller")
	defer resume()
	// The pod is created without a record (kovs-controller's ServiceAccount may not create
	// pods); the record is then written as kovs-controller, which dist/'s policy allows.
	pod, err := c.s.Client.CoreV1().Pods("x").Create(ctx, forgedPod("forged", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the forged pod: %v", err)
	}
	defer c.s.DeletePod(t, "x", "forged", podTimeout)
	setRecord := func(record string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipam.PodNetworkAnnotationKey: record}}})
		if _, err := controller.CoreV1().Pods("x").Patch(ctx, "forged", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("write the forged pod's record as kovs-controller: %v", err)
		}
	}
	setRecord(stolen)
	c.refusedToRun(t, "a copy of b's record", pod.UID, "not this pod's", bIPs)

	// b's addresses under the forged pod's own UID, as a controller bug would write them.
	var record map[string]any
	if err := json.Unmarshal([]byte(stolen), &record); err != nil {
		t.Fatal(err)
	}
	record["uid"] = string(pod.UID)
	own, _ := json.Marshal(record)
	setRecord(string(own))
	c.refusedToRun(t, "b's address under its own UID", pod.UID, "is held by port", bIPs)

	resume()
	running := c.s.WaitRunning(t, "x", "forged", podTimeout)
	for _, ip := range framework.PodIPs(running) {
		if slices.Contains(bIPs, ip) {
			t.Errorf("once the controller ran again the forged pod runs with b's address %s", ip)
		}
	}
	if r := c.s.Probe(c.pods["c"], bIPs[0], "80/tcp", probeTimeout); !r.Connected || r.Reply.Identity != "x/b" {
		t.Errorf("c -> b's address %s after the attack: %s", bIPs[0], framework.Describe(r))
	}
	c.checkNoSharedAddress(t)
}

// refusedToRun waits for the positive evidence that node1's agent refused the CNI ADD of
// pod x/forged (UID uid) for the reason its message contains: the FailedCreatePodSandBox
// Event the node records with the plugin's error. Silence is not a refusal: a pod whose
// ADD never ran would also never run with b's address. It fails if the pod runs with one
// of ips meanwhile, or once the refusal is seen. The agent answers an ADD whose record is
// not the pod's own only after its PodNetworkWait (30 s), and the node retries a failed
// sandbox with a backoff: hence the 90 s.
func (c *cluster) refusedToRun(t *testing.T, what string, uid types.UID, reason string, ips []netip.Addr) {
	t.Helper()
	ctx := context.Background()
	withStolen := func() string {
		p, err := c.s.Client.CoreV1().Pods("x").Get(ctx, "forged", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range framework.PodIPs(p) {
			if slices.Contains(ips, ip) {
				return fmt.Sprintf("with %s the forged pod runs with b's address %s (phase %s)", what, ip, p.Status.Phase)
			}
		}
		return ""
	}
	selector := fields.Set{"involvedObject.uid": string(uid), "reason": "FailedCreatePodSandBox"}.AsSelector().String()
	var refusal string
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("node1's refusal of the forged pod's CNI ADD (%q) with %s", reason, what), func() error {
		if stolen := withStolen(); stolen != "" {
			t.Fatal(stolen)
		}
		events, err := c.s.Client.CoreV1().Events("x").List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if strings.Contains(e.Message, reason) {
				refusal = e.Message
				return nil
			}
			seen = append(seen, e.Message)
		}
		return fmt.Errorf("no such Event; the pod's sandbox Events: %q", seen)
	})
	t.Logf("with %s: %s", what, refusal)
	if stolen := withStolen(); stolen != "" {
		t.Error(stolen)
	}
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

// restoreAnnotation puts the pod's own record back (as kovs-controller).
func (c *cluster) restoreAnnotation(t *testing.T, p *corev1.Pod) {
	controller := c.s.ClientAs(t, framework.ControllerUser, "system:serviceaccounts", "system:serviceaccounts:kube-system")
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		ipam.PodNetworkAnnotationKey: p.Annotations[ipam.PodNetworkAnnotationKey]}}})
	if _, err := controller.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("restore %s/%s's record: %v", p.Namespace, p.Name, err)
	}
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
