package agent

import (
	"context"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
)

// CNI verbs as the agent sees them: each is one request (the DEL that undoes a failed
// ADD counts as a DEL).
const (
	verbAdd    = "ADD"
	verbDel    = "DEL"
	verbCheck  = "CHECK"
	verbGC     = "GC"
	verbStatus = "STATUS"
)

// measuredHandler counts the CNI requests the agent serves and times pod network setup
// (an ADD, from its request to its answer).
type measuredHandler struct {
	next    cni.Handler
	metrics *Metrics
	now     func() time.Time
}

var _ cni.Handler = (*measuredHandler)(nil)

// cniHandler returns h measured, or h itself without metrics.
func (m *Metrics) cniHandler(h cni.Handler) cni.Handler {
	if m == nil {
		return h
	}
	return &measuredHandler{next: h, metrics: m, now: time.Now}
}

func (h *measuredHandler) Add(ctx context.Context, req cni.AddRequest) (*cni.PodNetworkConfig, error) {
	start := h.now()
	cfg, err := h.next.Add(ctx, req)
	h.metrics.cniRequest(verbAdd, err)
	h.metrics.podSetupDone(h.now().Sub(start), err)
	return cfg, err
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
