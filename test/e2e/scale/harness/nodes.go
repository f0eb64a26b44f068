package harness

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// The agents' ServiceAccount (dist/rbac.yaml): only its node-bound tokens may stream.
const (
	agentNamespace      = "kube-system"
	agentServiceAccount = "kovs-agent"
)

// registerNodes registers every node (hollow kubelets), starts their heartbeats if the
// run renews Leases (Config.LeaseRenewInterval), waits
// for kovs-controller to give each its blocks, and then does what each agent does once
// its node is programmed: NetworkUnavailable=False.
func (h *Harness) registerNodes(ctx context.Context) error {
	start := time.Now()
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(h.cfg.CreateConcurrency)
	for i := range h.cfg.Nodes {
		g.Go(func() error { return h.kubelets.register(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if h.cfg.LeaseRenewInterval > 0 {
		h.wg.Go(func() { h.kubelets.heartbeat(ctx, h.nodes, h.cfg.LeaseRenewInterval) })
	}
	lister := h.factory.Core().V1().Nodes().Lister()
	err := waitUntil(ctx, h.cfg.ConvergenceTimeout, time.Second, "kovs-controller to give every node its blocks", func() error {
		nodes, err := lister.List(labels.SelectorFromSet(labels.Set{labelWorkload: "true"}))
		if err != nil {
			return err
		}
		done := 0
		for _, n := range nodes {
			if _, ok := n.Annotations[ipam.NodeSubnetsAnnotationKey]; ok {
				mu.Lock()
				h.nodeUIDs[n.Name] = n.UID
				mu.Unlock()
				done++
			}
		}
		if done < h.cfg.Nodes {
			return fmt.Errorf("%d of %d nodes have %s", done, h.cfg.Nodes, ipam.NodeSubnetsAnnotationKey)
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.result.NodeBlocks = time.Since(start)
	return h.forEachNode(ctx, h.markNetworkAvailable)
}

// markNetworkAvailable is the agent's Node status patch once br-int is programmed.
func (h *Harness) markNetworkAvailable(ctx context.Context, node string) error {
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse,
		Reason: "KovsAgentReady", Message: "kovs-agent programmed br-int", LastTransitionTime: now, LastHeartbeatTime: now}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	return retryWrite(ctx, func() error {
		_, err := h.agent.CoreV1().Nodes().PatchStatus(ctx, node, patch)
		return err
	})
}

func (h *Harness) forEachNode(ctx context.Context, f func(context.Context, string) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(h.cfg.CreateConcurrency)
	for _, n := range h.nodes {
		g.Go(func() error { return f(gctx, n) })
	}
	return g.Wait()
}

// startAgents gives every node's agent a token bound to its Node (as its DaemonSet pod's
// projected token would be) and starts it; it returns once every agent has its snapshot.
func (h *Harness) startAgents(ctx context.Context) error {
	start := time.Now()
	var pool stream.ClientConfig
	err := waitUntil(ctx, time.Minute, time.Second, "the controller's CA in kube-system/kovs-ca", func() error {
		roots, err := stream.CAFromConfigMap(h.agent, "kube-system", "kovs-ca")(ctx)
		pool.RootCAs = func(context.Context) (*x509.CertPool, error) { return roots, nil }
		return err
	})
	if err != nil {
		return err
	}
	// Every agent follows kovs-controller's leader Lease, as dist's agents do (one
	// informer for all of them here, where each real agent has its own): a failover
	// reaches them as the Lease's change, not only as a failed connection.
	leader, err := stream.FollowLease(ctx, h.agent, "kube-system", "kovs-controller")
	if err != nil {
		return err
	}
	pool.Leader = leader
	address := fmt.Sprintf("127.0.0.1:%d", h.state.ControllerPort)
	var mu sync.Mutex
	err = h.forEachNode(ctx, func(gctx context.Context, node string) error {
		token, err := h.nodeToken(gctx, node)
		if err != nil {
			return err
		}
		a := newAgent(node, h.realization)
		mu.Lock()
		h.agents[node] = a
		mu.Unlock()
		h.wg.Go(func() { _ = a.run(ctx, address, token, pool) }) // ctx: the run's, not the group's
		return nil
	})
	if err != nil {
		return err
	}
	err = waitUntil(ctx, h.cfg.ConvergenceTimeout, time.Second, "every agent's first snapshot", func() error {
		if n := h.agentsWithSnapshot(); n < h.cfg.Nodes {
			return fmt.Errorf("%d of %d agents have their snapshot", n, h.cfg.Nodes)
		}
		return nil
	})
	h.result.AgentsConnected = time.Since(start)
	return err
}

func (h *Harness) agentsWithSnapshot() int {
	n := 0
	for _, a := range h.sortedAgents() {
		if a.snapshots.Load() > 0 {
			n++
		}
	}
	return n
}

// nodeToken requests a token of the agents' ServiceAccount for kovs-controller, bound
// to the node's Node (sandbox.NodeBoundToken, without reading the Node again).
func (h *Harness) nodeToken(ctx context.Context, node string) (string, error) {
	lifetime := int64(24 * 3600)
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{stream.TokenAudience},
		ExpirationSeconds: &lifetime,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: h.nodeUIDs[node]}}}
	var token string
	err := retryWrite(ctx, func() error {
		tr, err := h.agent.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentServiceAccount, req, metav1.CreateOptions{})
		if err == nil {
			token = tr.Status.Token
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s bound to node %s: %w", agentNamespace, agentServiceAccount, node, err)
	}
	return token, nil
}
