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

func podIP(t *testing.T, c kubernetes.Interface, ns, name string) netip.Addr {
	t.Helper()
	var ip netip.Addr
	waitFor(t, "addresses of "+ns+"/"+name, func() error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n, err := ipam.ParsePodNetwork(p.Annotations[ipam.PodNetworkAnnotationKey])
		if err != nil {
			return err
		}
		ip = n.Addresses[0].Address.Addr()
		return nil
	})
	return ip
}

func TestNodesGetDistinctSubnetsAndPodsAddressesFromThem(t *testing.T) {
	c := fake.NewClientset(node("a"), node("b"))
	start(t, c, plan(t, "10.244.0.0/16", 24))
	sa, sb := nodeSubnets(t, c, "a"), nodeSubnets(t, c, "b")
	if sa[0] == sb[0] {
		t.Fatalf("nodes share block %s", sa[0])
	}
	ctx := context.Background()
	for i, n := range []string{"a", "b", "a"} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod("default", fmt.Sprint("p", i), n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[netip.Addr]string{}
	for i, n := range []string{"a", "b", "a"} {
		ip := podIP(t, c, "default", fmt.Sprint("p", i))
		block := map[string]netip.Prefix{"a": sa[0], "b": sb[0]}[n]
		if !block.Contains(ip) || ip == block.Addr().Next() {
			t.Errorf("pod p%d on %s got %s, want a non-gateway address of %s", i, n, ip, block)
		}
		if other, dup := seen[ip]; dup {
			t.Errorf("p%d and %s share %s", i, other, ip)
		}
		seen[ip] = fmt.Sprint("p", i)
	}
}

func TestFreedAddressGoesToTheBackOfTheLine(t *testing.T) {
	c := fake.NewClientset(node("a"))
	start(t, c, plan(t, "10.244.0.0/16", 24))
	ctx := context.Background()
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "first", "a"), metav1.CreateOptions{})
	first := podIP(t, c, "default", "first")
	if err := c.CoreV1().Pods("default").Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "first", "a"), metav1.CreateOptions{})
	again := podIP(t, c, "default", "first")
	if again == first {
		t.Fatalf("a new pod of the same name got the freed address %s at once", first)
	}
	if again != first.Next() {
		t.Errorf("got %s, want the next never-used address %s", again, first.Next())
	}
}

func TestRestartRebuildsFromAnnotationsWithoutDuplicates(t *testing.T) {
	c := fake.NewClientset(node("a"))
	stop := start(t, c, plan(t, "10.244.0.0/16", 24))
	ctx := context.Background()
	var before []netip.Addr
	for i := 0; i < 5; i++ {
		_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", fmt.Sprint("p", i), "a"), metav1.CreateOptions{})
		before = append(before, podIP(t, c, "default", fmt.Sprint("p", i)))
	}
	block := nodeSubnets(t, c, "a")
	stop()
	// A second node appears while no controller runs; the restarted one must not hand
	// out node a's block again, nor any live pod's address.
	_, _ = c.CoreV1().Nodes().Create(ctx, node("b"), metav1.CreateOptions{})
	start(t, c, plan(t, "10.244.0.0/16", 24))
	if got := nodeSubnets(t, c, "b"); got[0] == block[0] {
		t.Fatalf("node b got node a's block %s after a restart", block[0])
	}
	if got := nodeSubnets(t, c, "a"); got[0] != block[0] {
		t.Fatalf("node a's block changed across a restart: %s -> %s", block[0], got[0])
	}
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "new", "a"), metav1.CreateOptions{})
	ip := podIP(t, c, "default", "new")
	for i, old := range before {
		if ip == old {
			t.Fatalf("new pod got %s, held by live pod p%d", ip, i)
		}
		if again := podIP(t, c, "default", fmt.Sprint("p", i)); again != old {
			t.Errorf("p%d's address changed across a restart: %s -> %s", i, old, again)
		}
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

func TestFinishedPodReleasesItsAddress(t *testing.T) {
	c := fake.NewClientset(node("a"))
	start(t, c, plan(t, "10.244.0.0/16", 30)) // one usable address per node
	ctx := context.Background()
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "job", "a"), metav1.CreateOptions{})
	ip := podIP(t, c, "default", "job")
	p, _ := c.CoreV1().Pods("default").Get(ctx, "job", metav1.GetOptions{})
	p.Status.Phase = corev1.PodSucceeded
	if _, err := c.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "next", "a"), metav1.CreateOptions{})
	// Quarantine is off in this test: the only address comes back once the job finished.
	if got := podIP(t, c, "default", "next"); got != ip {
		t.Fatalf("next pod got %s, want the finished pod's %s", got, ip)
	}
}

// TestRestartDoesNotHandOutAFreedAddressAtOnce: an address freed just before a restart
// (the highest one handed out, so no live pod's record says it was ever used) is not the
// restarted controller's next address: the Node's recorded high water keeps it at the
// back of the line (issue 14).
func TestRestartDoesNotHandOutAFreedAddressAtOnce(t *testing.T) {
	c := fake.NewClientset(node("a"))
	stop := start(t, c, plan(t, "10.244.0.0/16", 24))
	ctx := context.Background()
	var ips []netip.Addr
	for i := 0; i < 3; i++ {
		_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", fmt.Sprint("p", i), "a"), metav1.CreateOptions{})
		ips = append(ips, podIP(t, c, "default", fmt.Sprint("p", i)))
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	start(t, c, plan(t, "10.244.0.0/16", 24))
	_, _ = c.CoreV1().Pods("default").Create(ctx, pod("default", "new", "a"), metav1.CreateOptions{})
	got := podIP(t, c, "default", "new")
	if got == ips[2] {
		t.Fatalf("the restarted controller handed out %s, freed just before the restart, at once", got)
	}
	for _, ip := range ips[:2] {
		if got == ip {
			t.Fatalf("the new pod got %s, held by a live pod", got)
		}
	}
}
