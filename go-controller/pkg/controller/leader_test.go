package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
)

// Two replicas: only the leader allocates; when it stops, the other takes over and goes
// on from the recorded state (no block handed out twice).
func TestLeaderElectionHandsOverWithoutDoubleAllocation(t *testing.T) {
	c := withLeaseConcurrency(fake.NewClientset(node("a")))
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

// withLeaseConcurrency gives the fake clientset's Leases the API server's optimistic
// concurrency: an update must carry the resourceVersion it read. The fake's own tracker
// takes the last write, so two electors that each read the Lease and write it both win:
// a replica renewing from a stale read overwrites the other's take-over, and both lead
// (seen in a CI run, 2026-12-06: a Lease back at 0 transitions after one hand-over).
// Leader election is only as safe as that compare-and-swap, so the tests need it.
func withLeaseConcurrency(c *fake.Clientset) *fake.Clientset {
	var version int64
	leases := map[types.NamespacedName]*coordinationv1.Lease{}
	// The fake runs its reactors one at a time, under its own lock.
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// By verb: the create and update action interfaces have the same methods.
		switch a.GetVerb() {
		case "get":
			a := a.(k8stesting.GetAction)
			l, ok := leases[types.NamespacedName{Namespace: a.GetNamespace(), Name: a.GetName()}]
			if !ok {
				return true, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), a.GetName())
			}
			return true, l.DeepCopy(), nil
		case "create":
			l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			key := types.NamespacedName{Namespace: a.GetNamespace(), Name: l.Name}
			if _, ok := leases[key]; ok {
				return true, nil, apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), l.Name)
			}
			version++
			l.Namespace, l.ResourceVersion = a.GetNamespace(), strconv.FormatInt(version, 10)
			leases[key] = l
			return true, l.DeepCopy(), nil
		case "update":
			l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			key := types.NamespacedName{Namespace: a.GetNamespace(), Name: l.Name}
			old, ok := leases[key]
			if !ok {
				return true, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), l.Name)
			}
			if l.ResourceVersion != old.ResourceVersion {
				return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name,
					fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, old.ResourceVersion))
			}
			version++
			l.Namespace, l.ResourceVersion = a.GetNamespace(), strconv.FormatInt(version, 10)
			leases[key] = l
			return true, l.DeepCopy(), nil
		}
		return false, nil, nil
	})
	return c
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

// A stopping leader releases its Lease only once its reconcilers have stopped: while one
// of its writes is still in flight, no successor may start (it would not see that write
// and could hand the same block or address out again).
func TestLeaseReleasedOnlyAfterTheControllersStop(t *testing.T) {
	inFlight, unblock := make(chan struct{}), make(chan struct{})
	var first sync.Once
	fc := fake.NewClientset()
	c := slowNodePatches{Interface: fc, before: func() {
		first.Do(func() { close(inFlight) })
		<-unblock // a write the API server has not answered yet
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(ctx, Config{Addresses: addresses.Config{ClusterCIDRs: plan(t, "10.244.0.0/16", 24)}, LeaderElect: true,
			LeaseNamespace: "kube-system", LeaseName: "kovs-controller", Identity: "old",
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, c)
	}()
	if holder := leaseHolder(t, fc); holder != "old" {
		t.Fatalf("lease held by %q", holder)
	}
	_, _ = c.CoreV1().Nodes().Create(context.Background(), node("a"), metav1.CreateOptions{})
	select {
	case <-inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never wrote node a's subnets")
	}
	cancel()
	// Ten retry periods: long enough for a release that does not wait to happen.
	time.Sleep(time.Second)
	if holder := leaseHolder(t, fc); holder != "old" {
		close(unblock)
		t.Fatalf("lease released (holder %q) while the old leader's write was in flight", holder)
	}
	close(unblock)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its write finished")
	}
	if holder := leaseHolder(t, fc); holder != "" {
		t.Errorf("lease still held by %q after Run returned", holder)
	}
}

// slowNodePatches runs before ahead of every Node patch (outside the fake clientset's
// lock, which a blocking reactor would hold against the Lease's renewals too).
type slowNodePatches struct {
	kubernetes.Interface
	before func()
}

// IsWatchListSemanticsUnSupported is the fake clientset's: its watches send no bookmarks.
func (s slowNodePatches) IsWatchListSemanticsUnSupported() bool { return true }

func (s slowNodePatches) CoreV1() corev1client.CoreV1Interface {
	return slowCore{s.Interface.CoreV1(), s.before}
}

type slowCore struct {
	corev1client.CoreV1Interface
	before func()
}

func (s slowCore) Nodes() corev1client.NodeInterface {
	return slowNodes{s.CoreV1Interface.Nodes(), s.before}
}

type slowNodes struct {
	corev1client.NodeInterface
	before func()
}

func (s slowNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	s.before()
	return s.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// Two replicas that would get one identity from hostname_pid (host network on hosts that
// share a hostname, PID 1 each: here, one process) must not both lead.
func TestReplicasWithoutIdentityDoNotBothLead(t *testing.T) {
	c := withLeaseConcurrency(fake.NewClientset())
	for _, name := range []string{"kovs-controller-a", "kovs-controller-b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
		if _, err := c.CoreV1().Pods("kube-system").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = Run(ctx, Config{Addresses: addresses.Config{ClusterCIDRs: plan(t, "10.244.0.0/16", 24)}, LeaderElect: true,
				LeaseNamespace: "kube-system", LeaseName: "kovs-controller", Pod: OwnPod{Namespace: "kube-system", Name: name},
				LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, c)
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	leaders := func() []string {
		pods, err := c.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: LeaderLabel})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		return names
	}
	waitFor(t, "a leader", func() error {
		if len(leaders()) == 0 {
			return fmt.Errorf("no pod labelled %s", LeaderLabel)
		}
		return nil
	})
	// Both replicas retry every 100 ms: fifteen rounds for a second one to take the lead.
	// Two replicas of one identity both hold the Lease without it ever changing hands. Two
	// labels after the Lease changed hands are another thing: the old leader, starved on a
	// loaded machine past this test's 500 ms renew deadline, has not yet noticed it lost
	// the Lease (client-go's election has no fencing; seen in a CI run, 2026-12-06). The
	// Lease's transitions tell the two apart.
	for i := 0; i < 15; i++ {
		if l := leaders(); len(l) > 1 {
			lease, err := c.CoordinationV1().Leases("kube-system").Get(context.Background(), "kovs-controller", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tr := lease.Spec.LeaseTransitions; tr == nil || *tr == 0 {
				t.Fatalf("both replicas lead, and the Lease never changed hands (holder %v): %v", ptrString(lease.Spec.HolderIdentity), l)
			}
			t.Logf("both pods labelled right after a hand-over (%d transitions, holder %s): %v", *lease.Spec.LeaseTransitions, ptrString(lease.Spec.HolderIdentity), l)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
