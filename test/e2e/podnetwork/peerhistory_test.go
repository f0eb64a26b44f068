package podnetwork_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

// peerHistory records, while a test changes a peer's records, every version of the peer's
// Node kube-apiserver hands out (its resourceVersion, kovs.io/node-subnets, and who wrote
// that annotation last: the manager in managedFields) and every change of the node's
// agent's view of the peer (/status). It is printed when a verdict fails: a view that
// does not follow the records then shows which write it followed, and whose it was.
type peerHistory struct {
	mu    sync.Mutex
	lines []string
	stop  func()
}

// recordPeer starts the history of node's view of peer from the peer's resourceVersion
// since (the version the test read).
func (c *cluster) recordPeer(t *testing.T, node, peer, since string) *peerHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &peerHistory{}
	w, err := c.s.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", peer).String(), ResourceVersion: since})
	if err != nil {
		cancel()
		t.Fatalf("watch node %s: %v", peer, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range w.ResultChan() {
			h.add("%s %s: %s", peer, ev.Type, describeRecord(ev))
		}
	}()
	go func() {
		defer wg.Done()
		last := ""
		for ctx.Err() == nil {
			view := "unreadable"
			if st, err := c.s.AgentStatus(node); err != nil {
				view = err.Error()
			} else {
				view = peerView(st)
			}
			if view != last {
				h.add("%s's agent: %s", node, view)
				last = view
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	h.stop = func() {
		cancel()
		w.Stop()
		wg.Wait()
	}
	t.Cleanup(h.stop)
	return h
}

// peerView is what an agent's /status says of its tunnel peers.
func peerView(st nodestatus.Status) string {
	return fmt.Sprintf("peers %+v, rejected %+v", st.Peers, st.RejectedPeers)
}

func (h *peerHistory) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// String is the history so far, one line per event.
func (h *peerHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return "history:\n\t" + strings.Join(h.lines, "\n\t")
}

// describeRecord is a watched Node version: its resourceVersion, its subnets record and
// the managedFields entries that own that annotation.
func describeRecord(ev watch.Event) string {
	n, ok := ev.Object.(interface {
		GetResourceVersion() string
		GetAnnotations() map[string]string
		GetManagedFields() []metav1.ManagedFieldsEntry
	})
	if !ok {
		return fmt.Sprintf("%T %v", ev.Object, ev.Object)
	}
	var writers []string
	key := "f:" + ipam.NodeSubnetsAnnotationKey
	for _, m := range n.GetManagedFields() {
		if m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), key) {
			at := ""
			if m.Time != nil {
				at = m.Time.UTC().Format("15:04:05")
			}
			writers = append(writers, fmt.Sprintf("%s (%s%s at %s)", m.Manager, m.Operation, subresource(m.Subresource), at))
		}
	}
	return fmt.Sprintf("resourceVersion %s, %s=%s, written by %s", n.GetResourceVersion(), ipam.NodeSubnetsAnnotationKey,
		n.GetAnnotations()[ipam.NodeSubnetsAnnotationKey], strings.Join(writers, ", "))
}

func subresource(s string) string {
	if s == "" {
		return ""
	}
	return " of " + s
}
