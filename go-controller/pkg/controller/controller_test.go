package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

func plan(t *testing.T, cidr string, block int) []ipam.ClusterCIDR {
	t.Helper()
	c, err := ipam.ParseClusterCIDR(cidr, block)
	if err != nil {
		t.Fatal(err)
	}
	return []ipam.ClusterCIDR{c}
}

// start runs the controller against client until the test ends (or stop is called).
func start(t *testing.T, client kubernetes.Interface, cidrs []ipam.ClusterCIDR) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, Config{Addresses: addresses.Config{ClusterCIDRs: cidrs}, Workers: 2}, client); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func pod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-" + fmt.Sprint(time.Now().UnixNano()))},
		Spec: corev1.PodSpec{NodeName: node}}
}

func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func nodeSubnets(t *testing.T, c kubernetes.Interface, name string) []netip.Prefix {
	t.Helper()
	var blocks []netip.Prefix
	waitFor(t, "subnets of "+name, func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a, err := ipam.ParseNodeSubnetsAnnotation(n.Annotations[ipam.NodeSubnetsAnnotationKey])
		if err != nil {
			return err
		}
		blocks = a.Blocks()
		return nil
	})
	return blocks
}

func TestNodesGetDistinctSubnets(t *testing.T) {
	c := fake.NewClientset(node("a"), node("b"))
	start(t, c, plan(t, "10.244.0.0/16", 24))
	sa, sb := nodeSubnets(t, c, "a"), nodeSubnets(t, c, "b")
	if sa[0] == sb[0] {
		t.Fatalf("nodes share block %s", sa[0])
	}
}

// TestControllerWritesNothingOnPods: pod addresses are the node agents'. The controller
// reads a scheduled pod (its bandwidth warning Event shows it did) and writes nothing on
// it: no patch, no update, no kovs annotation.
func TestControllerWritesNothingOnPods(t *testing.T) {
	c := fake.NewClientset(node("a"))
	start(t, c, plan(t, "10.244.0.0/16", 24))
	nodeSubnets(t, c, "a")
	ctx := context.Background()
	p := pod("default", "web", "a")
	p.Annotations = map[string]string{bandwidth.EgressAnnotation: "not-a-rate"}
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the controller's bandwidth warning on default/web", func() error {
		events, _ := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "web" && e.Reason == addresses.ReasonInvalidBandwidth {
				return nil
			}
		}
		return fmt.Errorf("no %s event yet", addresses.ReasonInvalidBandwidth)
	})
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "pods" && a.GetVerb() != "list" && a.GetVerb() != "watch" && a.GetVerb() != "get" &&
			!(a.GetVerb() == "create" && a.GetNamespace() == "default") {
			t.Errorf("the controller wrote on a pod: %s %s", a.GetVerb(), a.GetResource())
		}
	}
	got, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[ipam.PodNetworkAnnotationKey]; ok {
		t.Error("the pod carries a kovs.io/pod-network annotation")
	}
}

func TestRestartKeepsNodeBlocks(t *testing.T) {
	c := fake.NewClientset(node("a"))
	stop := start(t, c, plan(t, "10.244.0.0/16", 24))
	ctx := context.Background()
	block := nodeSubnets(t, c, "a")
	stop()
	// A second node appears while no controller runs; the restarted one must not hand
	// out node a's block again.
	_, _ = c.CoreV1().Nodes().Create(ctx, node("b"), metav1.CreateOptions{})
	start(t, c, plan(t, "10.244.0.0/16", 24))
	if got := nodeSubnets(t, c, "b"); got[0] == block[0] {
		t.Fatalf("node b got node a's block %s after a restart", block[0])
	}
	if got := nodeSubnets(t, c, "a"); got[0] != block[0] {
		t.Fatalf("node a's block changed across a restart: %s -> %s", block[0], got[0])
	}
}

func TestSubnetExhaustionIsLoud(t *testing.T) {
	c := fake.NewClientset(node("a"), node("b"))
	start(t, c, plan(t, "10.244.0.0/24", 25))
	nodeSubnets(t, c, "a")
	nodeSubnets(t, c, "b")
	ctx := context.Background()
	_, _ = c.CoreV1().Nodes().Create(ctx, node("c"), metav1.CreateOptions{})
	waitFor(t, "an exhaustion event and condition on node c", func() error {
		events, _ := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		var msg string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "c" && e.Reason == addresses.ReasonSubnetExhausted {
				msg = e.Message
			}
		}
		if msg == "" {
			return fmt.Errorf("no %s event", addresses.ReasonSubnetExhausted)
		}
		for _, want := range []string{"10.244.0.0/24", "/25", "2"} {
			if !strings.Contains(msg, want) {
				return fmt.Errorf("event %q does not name %s", msg, want)
			}
		}
		n, _ := c.CoreV1().Nodes().Get(ctx, "c", metav1.GetOptions{})
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeNetworkUnavailable && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node c has no NetworkUnavailable=True condition: %+v", n.Status.Conditions)
	})
}
