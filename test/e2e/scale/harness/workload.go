package harness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createNamespaces creates the model's namespaces.
func (h *Harness) createNamespaces(ctx context.Context, written *writeCount) error {
	spaces := h.model.spaces
	err := h.parallel(ctx, len(spaces), func(ctx context.Context, i int) error {
		return written.count(retryWrite(ctx, func() error {
			_, err := h.workload.CoreV1().Namespaces().Create(ctx, namespaceObject(spaces[i]), metav1.CreateOptions{})
			return err
		}))
	})
	if err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	return nil
}

// createWorkload creates the namespaces, then the pods (bound to uniformly drawn nodes),
// then the policies: np-1 and np-2 of shape (a) in every namespace.
func (h *Harness) createWorkload(ctx context.Context) error {
	h.result.WorkloadStart = time.Now()
	var written writeCount
	defer func() { h.result.WorkloadObjects = written.Load() }()
	spaces := h.model.spaces
	if err := h.createNamespaces(ctx, &written); err != nil {
		return err
	}
	err := h.parallel(ctx, h.cfg.Pods(), func(ctx context.Context, i int) error {
		ns := spaces[i%len(spaces)]
		return written.count(h.createPod(ctx, podRef{ns, fmt.Sprintf("pod-%d", i/len(spaces))}, 1+(i/len(spaces))%2))
	})
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	err = h.parallel(ctx, len(spaces)*h.cfg.PoliciesPerNS, func(ctx context.Context, i int) error {
		sel := selector{spaces[i%len(spaces)], 1 + i/len(spaces)}
		np := policyObject(fmt.Sprintf("np-%d", sel.App), sel)
		return written.count(retryWrite(ctx, func() error {
			_, err := h.workload.NetworkingV1().NetworkPolicies(sel.Namespace).Create(ctx, np, metav1.CreateOptions{})
			return err
		}))
	})
	if err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	h.result.WorkloadWritten = time.Now()
	return nil
}

// writeCount counts the writes that succeeded.
type writeCount struct{ atomic.Int64 }

// count counts a write that returned err, and returns err.
func (w *writeCount) count(err error) error {
	if err == nil {
		w.Add(1)
	}
	return err
}

// createPod places a pod in the model on a uniformly drawn node and creates it, timing
// its address allocation.
func (h *Harness) createPod(ctx context.Context, ref podRef, app int) error {
	return h.createPlaced(ctx, ref, h.model.place(ref, app))
}

// createPlaced creates a pod the model has placed, timing its address allocation.
func (h *Harness) createPlaced(ctx context.Context, ref podRef, place podPlace) error {
	h.alloc.creating(ref)
	err := retryWrite(ctx, func() error {
		_, err := h.workload.CoreV1().Pods(ref.Namespace).Create(ctx, podObject(ref, place), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		h.alloc.failed(ref)
		h.model.remove(ref)
	} else {
		h.alloc.created(ref)
	}
	return err
}

// deletePod deletes a pod gracefully, as a user does (its hollow kubelet completes it).
func (h *Harness) deletePod(ctx context.Context, ref podRef) error {
	h.model.remove(ref)
	h.alloc.deleted(ref)
	err := retryWrite(ctx, func() error {
		return h.workload.CoreV1().Pods(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{})
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// parallel runs f for 0..n-1 with CreateConcurrency writers.
func (h *Harness) parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(h.cfg.CreateConcurrency)
	for i := range n {
		g.Go(func() error { return f(gctx, i) })
	}
	return g.Wait()
}
