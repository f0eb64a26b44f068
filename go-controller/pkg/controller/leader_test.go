package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
)

// Two replicas: only the leader allocates; when it stops, the other takes over and goes
// on from the recorded state (no block handed out twice).
func TestLeaderElectionHandsOverWithoutDoubleAllocation(t *testing.T) {
	c := fake.NewClientset(node("a"))
	cidrs := plan(t, "10.244.0.0/16", 24)
	run := func(id string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = Run(ctx, Config{Addresses: addresses.Config{ClusterCIDRs: cidrs}, LeaderElect: true,
				LeaseNamespace: "kube-system", LeaseName: "kovs-controller", Identity: id,
				LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, c)
		}()
		return func() { cancel(); <-done }
	}
	stopFirst := run("first")
	a := nodeSubnets(t, c, "a")
	stopSecond := run("second")
	defer stopSecond()
	if holder := leaseHolder(t, c); holder != "first" {
		t.Fatalf("lease held by %q while the first replica runs", holder)
	}
	stopFirst()
	waitFor(t, "the second replica to lead", func() error {
		if h := leaseHolder(t, c); h != "second" {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
	_, _ = c.CoreV1().Nodes().Create(context.Background(), node("b"), metav1.CreateOptions{})
	if b := nodeSubnets(t, c, "b"); b[0] == a[0] {
		t.Fatalf("the new leader handed node a's block %s to node b", a[0])
	}
}

func leaseHolder(t *testing.T, c *fake.Clientset) string {
	var holder string
	waitFor(t, "a lease", func() error {
		l, err := c.CoordinationV1().Leases("kube-system").Get(context.Background(), "kovs-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil {
			return fmt.Errorf("no holder")
		}
		holder = *l.Spec.HolderIdentity
		return nil
	})
	return holder
}
