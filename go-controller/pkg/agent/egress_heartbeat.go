package agent

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
)

// egressHeartbeat renews the node's heartbeat Lease (egress.HeartbeatLease) while the node
// may hold egress IPs (an Egress's node selector allows it) and the agent is ready: OVS
// connected and br-int programmed. kovs-controller moves the node's egress IPs elsewhere
// once the Lease is not renewed for its duration, three renew intervals.
type egressHeartbeat struct {
	a        *Agent
	interval time.Duration
	wanted   atomic.Bool
}

// run renews until ctx ends.
func (h *egressHeartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	failing := false
	for {
		if h.wanted.Load() && h.a.ready.get() == nil {
			err := h.renew(ctx)
			if err != nil && !failing {
				log.WithError(err).WithField("lease", egress.HeartbeatLease(h.a.cfg.NodeName)).Warn("egress heartbeat")
			}
			failing = err != nil
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *egressHeartbeat) renew(ctx context.Context) error {
	leases := h.a.client.CoordinationV1().Leases(h.a.cfg.EgressLeaseNamespace)
	name := egress.HeartbeatLease(h.a.cfg.NodeName)
	now := metav1.NewMicroTime(time.Now())
	var cidrs []string
	for _, p := range interfaceCIDRs(h.a.cfg.GatewayName) {
		cidrs = append(cidrs, p.String())
	}
	slices.Sort(cidrs)
	duration := int32(math.Ceil(3 * h.interval.Seconds()))
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.a.cfg.EgressLeaseNamespace,
			Labels: map[string]string{egress.HeartbeatLabel: "true", egress.HeartbeatNodeLabel: h.a.cfg.NodeName}}}
		l.Annotations = map[string]string{egress.HeartbeatCIDRsAnnotation: strings.Join(cidrs, ",")}
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h.a.cfg.NodeName), LeaseDurationSeconds: ptr.To(duration),
			AcquireTime: &now, RenewTime: &now}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[egress.HeartbeatCIDRsAnnotation] = strings.Join(cidrs, ",")
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, ptr.To(duration)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}
