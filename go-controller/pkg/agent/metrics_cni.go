package agent

import (
	"context"
	"sync"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// CNI verbs as the agent sees them: an ADD is a pod-network request followed by an
// attach; DEL, CHECK, GC and STATUS are one request each (the DEL that undoes a failed
// ADD counts as a DEL).
const (
	verbAdd    = "ADD"
	verbDel    = "DEL"
	verbCheck  = "CHECK"
	verbGC     = "GC"
	verbStatus = "STATUS"
)

// abandonedAfter is when an ADD that asked for its network config but never came back to
// attach (the plugin failed in between) is forgotten.
const abandonedAfter = 10 * time.Minute

// measuredHandler counts the CNI requests the agent serves and times pod network setup,
// from an ADD's network config request to its attach.
type measuredHandler struct {
	next    cni.Handler
	metrics *Metrics
	now     func() time.Time

	mu      sync.Mutex
	started map[string]time.Time // ADD in progress, by pod UID
}

var _ cni.Handler = (*measuredHandler)(nil)

// cniHandler returns h measured, or h itself without metrics.
func (m *Metrics) cniHandler(h cni.Handler) cni.Handler {
	if m == nil {
		return h
	}
	return &measuredHandler{next: h, metrics: m, now: time.Now, started: map[string]time.Time{}}
}

func (h *measuredHandler) PodNetwork(ctx context.Context, pod cni.PodRef) (*cni.PodNetworkConfig, error) {
	start := h.now()
	cfg, err := h.next.PodNetwork(ctx, pod)
	if err != nil {
		h.addDone(start, err) // the ADD ends here
		return cfg, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, t := range h.started {
		if start.Sub(t) > abandonedAfter {
			delete(h.started, uid)
		}
	}
	h.started[pod.UID] = start
	return cfg, nil
}

func (h *measuredHandler) Attach(ctx context.Context, req cni.AttachRequest) error {
	attachStart := h.now()
	err := h.next.Attach(ctx, req)
	h.mu.Lock()
	start, ok := h.started[req.Pod.UID]
	delete(h.started, req.Pod.UID)
	h.mu.Unlock()
	if !ok {
		start = attachStart // the network config was asked before a restart: time the attach
	}
	h.addDone(start, err)
	return err
}

func (h *measuredHandler) addDone(start time.Time, err error) {
	h.metrics.cniRequest(verbAdd, err)
	h.metrics.podSetupDone(h.now().Sub(start), err)
}

func (h *measuredHandler) Detach(ctx context.Context, req cni.DetachRequest) error {
	err := h.next.Detach(ctx, req)
	h.metrics.cniRequest(verbDel, err)
	return err
}

func (h *measuredHandler) Check(ctx context.Context, req cni.AttachRequest) error {
	err := h.next.Check(ctx, req)
	h.metrics.cniRequest(verbCheck, err)
	return err
}

func (h *measuredHandler) GC(ctx context.Context, valid []cni.Attachment) error {
	err := h.next.GC(ctx, valid)
	h.metrics.cniRequest(verbGC, err)
	return err
}

func (h *measuredHandler) Status(ctx context.Context) error {
	err := h.next.Status(ctx)
	h.metrics.cniRequest(verbStatus, err)
	return err
}
