package stream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestLeaseLeaderWakesWaitersOnAChange(t *testing.T) {
	var l LeaseLeader
	id, changed := l.Leader()
	if id != "" || l.Pod() != "" {
		t.Fatalf("a new LeaseLeader names %q (pod %q)", id, l.Pod())
	}
	l.set("")
	select {
	case <-changed:
		t.Fatal("woken without a change")
	default:
	}
	l.set("kovs-controller-7d4f-x2x_0c1d-uuid")
	select {
	case <-changed:
	default:
		t.Fatal("not woken by a new holder")
	}
	if id, _ := l.Leader(); id != "kovs-controller-7d4f-x2x_0c1d-uuid" || l.Pod() != "kovs-controller-7d4f-x2x" {
		t.Fatalf("leader %q, pod %q", id, l.Pod())
	}
}

// followLeader ends a session only when a replica other than the one that led at its
// start is named: not when the leader was unknown at first, nor when the Lease is
// released on the way.
func TestFollowLeaderEndsASessionOnlyOnAnotherLeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   string
		holders []string
		ended   *leaderChangedError
	}{
		{"another leader", "a_1", []string{"b_2"}, &leaderChangedError{from: "a_1", to: "b_2"}},
		{"released, then another", "a_1", []string{"", "b_2"}, &leaderChangedError{from: "a_1", to: "b_2"}},
		{"released, then the same", "a_1", []string{"", "a_1"}, nil},
		{"unknown at first", "", []string{"a_1"}, nil},
		{"unknown, then two", "", []string{"a_1", "b_2"}, &leaderChangedError{from: "a_1", to: "b_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &scriptedLeader{LeaseLeader: &LeaseLeader{}, asked: make(chan struct{}, 8)}
			l.set(tc.start)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan struct{})
			go func() {
				defer close(done)
				followLeader(ctx, l, cancel)
			}()
			// Each holder is set once followLeader has asked for the previous one.
			for _, h := range tc.holders {
				select {
				case <-l.asked:
				case <-done:
					t.Fatalf("the session ended before %q led", h)
				}
				l.set(h)
			}
			if tc.ended == nil {
				cancel(errors.New("test over"))
				<-done
				if cause := context.Cause(ctx); cause.Error() != "test over" {
					t.Fatalf("the session ended with %v", cause)
				}
				return
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the session did not end")
			}
			var got *leaderChangedError
			if !errors.As(context.Cause(ctx), &got) || *got != *tc.ended {
				t.Fatalf("the session ended with %v, want %v", context.Cause(ctx), tc.ended)
			}
		})
	}
}

// scriptedLeader signals every call of Leader on asked.
type scriptedLeader struct {
	*LeaseLeader
	asked chan struct{}
}

func (l *scriptedLeader) Leader() (string, <-chan struct{}) {
	id, changed := l.LeaseLeader.Leader()
	l.asked <- struct{}{}
	return id, changed
}

// A hung leader keeps the connection open and sends nothing (here: no keepalive for an
// hour, and the client's idle timeout an hour): once the Lease names another replica,
// the client leaves that connection and subscribes again at once.
func TestClientLeavesAControllerThatNoLongerLeads(t *testing.T) {
	src, leader := runLeaderFollowingClient(t, func() (string, error) { return "agent-node1", nil })
	eventually(t, "the first subscription", func() error {
		if n := src.watchCount("node1"); n != 1 {
			return fmt.Errorf("%d subscriptions", n)
		}
		return nil
	})
	leader.set("kovs-controller-b_2")
	eventually(t, "a second subscription after the leader changed", func() error {
		if n := src.watchCount("node1"); n < 2 {
			return fmt.Errorf("%d subscriptions", n)
		}
		return nil
	})
}

func TestFollowLeaseFollowsTheHolder(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kovs-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kovs-controller-a_1")}}
	client := fake.NewSimpleClientset(lease)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := FollowLease(ctx, client, "kube-system", "kovs-controller")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the holder", func() error {
		if pod := l.Pod(); pod != "kovs-controller-a" {
			return fmt.Errorf("pod %q", pod)
		}
		return nil
	})
	lease.Spec.HolderIdentity = ptr.To("kovs-controller-b_2")
	if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new holder", func() error {
		if pod := l.Pod(); pod != "kovs-controller-b" {
			return fmt.Errorf("pod %q", pod)
		}
		return nil
	})
	if err := client.CoordinationV1().Leases("kube-system").Delete(ctx, "kovs-controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no holder once the Lease is gone", func() error {
		if id, _ := l.Leader(); id != "" {
			return fmt.Errorf("leader %q", id)
		}
		return nil
	})
}

// TestClientRetriesAtOnceWhenTheLeaderChanges: a client waiting out its backoff after a
// failed connection (an hour here; up to MaxBackoff after a leader's death) tries again as
// soon as the Lease names a new leader, rather than when the backoff ends.
func TestClientRetriesAtOnceWhenTheLeaderChanges(t *testing.T) {
	var attempts atomic.Int32
	src, leader := runLeaderFollowingClient(t, func() (string, error) {
		if attempts.Add(1) == 1 {
			return "", errors.New("the first attempt fails, as against a dead leader")
		}
		return "agent-node1", nil
	})
	eventually(t, "the first, failed attempt", func() error {
		if n := attempts.Load(); n != 1 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	})
	leader.set("kovs-controller-b_2")
	eventually(t, "a subscription right after the leader changed", func() error {
		if n := src.watchCount("node1"); n != 1 {
			return fmt.Errorf("%d subscriptions after %d attempts", n, attempts.Load())
		}
		return nil
	})
}

// runLeaderFollowingClient runs node1's client against a server that sends nothing for an
// hour, following a Lease held by replica a, with an hour's idle timeout and backoff: only
// the Lease can make it reconnect within a test.
func runLeaderFollowingClient(t *testing.T, token func() (string, error)) (*fakeSource, *LeaseLeader) {
	t.Helper()
	src := newFakeSource()
	ts := startServer(t, ServerConfig{Source: src, Authenticator: testTokens, Authorizer: AgentAuthorizer{User: agentUser},
		KeepaliveInterval: time.Hour}, newTestPKI(t))
	leader := &LeaseLeader{}
	leader.set("kovs-controller-a_1")
	runClientWith(t, ClientConfig{Node: "node1", Address: ts.addr, Token: token,
		RootCAs: func(context.Context) (*x509.CertPool, error) { return ts.pki.roots, nil }, IdleTimeout: time.Hour,
		MinBackoff: time.Hour, MaxBackoff: time.Hour, Leader: leader}, newRecordingSink())
	return src, leader
}
