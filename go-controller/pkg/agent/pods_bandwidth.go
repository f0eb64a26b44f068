package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/runner"
)

// Pod bandwidth (docs/egress.md#pod-bandwidth). The agent reads the annotations from the
// API, so the limits are the same whichever runtime started the pod, and follow changes
// of a running pod's annotations. Both directions are OpenFlow meters in the datapath itself:
// egress (from the pod) the meter that the pod's Classifier flow applies first, ingress
// (to the pod) the one its Output flow applies last (pipeline.PodPort). Not tc: the
// userspace datapath reads the pod's veth with a packet socket before tc ingress runs,
// so ingress_policing_rate never sees the pod's packets; and a linux-htb QoS on the port,
// which does shape what OVS sends, queues up to a thousand packets, and on a lossy
// userspace datapath the limited flow fell far below its rate next to a busy neighbour.
const (
	// meterBurstMin is the smallest burst of a pod's meter (kbit): two 9000-byte frames, so
	// that a slow limit still passes whole packets.
	meterBurstMin = 150
	// ingressMeterBase + ofport is the ID of a pod's ingress meter; its egress meter's is
	// its ofport (ofports stay below 65280).
	ingressMeterBase = 1 << 16
	// bandwidthResync bounds how long a change made behind the agent's back (a meter
	// deleted by hand) stays.
	bandwidthResync = 30 * time.Second
)

// podMeter is a pod's meter for limit rate (bit/s): bursts of half a second at the rate,
// which keeps a TCP flow close to the rate; a shorter burst costs throughput (a 3 s TCP
// transfer at 50 Mbit/s on the sandbox: burst 0.1 s, 60% of the rate; 0.2 s, 80-90%;
// 0.5 s, 85-100%).
func podMeter(id uint32, rate uint64) ovs.Meter {
	kbps := uint32((rate + 999) / 1000)
	return ovs.Meter{ID: id, RateKbps: kbps, BurstKbits: max(kbps/2, meterBurstMin)}
}

// limitsOf reads the pod's bandwidth annotations. An unusable value limits nothing in its
// direction: it is logged here, once per value, and kovs-controller reports it on the pod
// with an Event (addresses.ReasonInvalidBandwidth).
func (p *PodPorts) limitsOf(namespace, name, uid string) bandwidth.Limits {
	key := namespace + "/" + name
	pod, err := p.pods.Pods(namespace).Get(name)
	if err != nil || (uid != "" && string(pod.UID) != uid) {
		delete(p.bandwidthWarned, key)
		return bandwidth.Limits{}
	}
	l, err := bandwidth.FromAnnotations(pod.Annotations)
	if err == nil {
		delete(p.bandwidthWarned, key)
		return l
	}
	if p.bandwidthWarned == nil {
		p.bandwidthWarned = map[string]string{}
	}
	if p.bandwidthWarned[key] != err.Error() {
		p.bandwidthWarned[key] = err.Error()
		log.WithField("pod", key).WithError(err).
			Warn("bandwidth annotation not applied: that direction of the pod is not limited")
	}
	return l
}

// applyLimits puts the pod's meters in place, before pp's flows refer to them, and sets
// pp's meter IDs; a meter no longer wanted is deleted (pruneMeters) once the flows without
// it are installed. have are the bridge's meters by ID if the caller listed them: one
// already as wanted is not set again (nil: every meter is set). Called with bandwidthMu
// held.
func (p *PodPorts) applyLimits(ctx context.Context, pp *pipeline.PodPort, l bandwidth.Limits, have map[uint32]ovs.Meter) error {
	for _, d := range []struct {
		annotation string
		rate       uint64
		id         uint32
		meter      *uint32
	}{
		{bandwidth.EgressAnnotation, l.Egress, pp.OFPort, &pp.EgressMeter},
		{bandwidth.IngressAnnotation, l.Ingress, ingressMeterBase + pp.OFPort, &pp.IngressMeter},
	} {
		*d.meter = 0
		if d.rate == 0 {
			continue
		}
		if p.meters == nil {
			return fmt.Errorf("apply %s of pod %s: no OpenFlow meter client", d.annotation, pp)
		}
		if m := podMeter(d.id, d.rate); have[m.ID] != m {
			if err := p.meters.SetMeter(ctx, m); err != nil {
				return fmt.Errorf("apply %s of pod %s: %w", d.annotation, pp, err)
			}
		}
		*d.meter = d.id
	}
	return nil
}

// restoreLimits applies a restored port's limits before its first flow sync, so the
// restarted agent's flows keep its meter; a failure is logged, and syncBandwidth retries.
// have are the bridge's meters, as applyLimits takes them.
func (p *PodPorts) restoreLimits(ctx context.Context, name string, pp *pipeline.PodPort, have map[uint32]ovs.Meter) {
	p.bandwidthMu.Lock()
	defer p.bandwidthMu.Unlock()
	if err := p.applyLimits(ctx, pp, p.limitsOf(pp.Namespace, pp.Name, pp.UID), have); err != nil {
		log.WithField("port", name).WithField("pod", pp.String()).WithError(err).Warn("bandwidth limits of a restored pod not applied yet")
	}
}

// syncBandwidth brings every pod port to its pod's current annotations, then deletes the
// meters no port uses: level-driven, so a restart, an annotation change and
// a hand-made change all converge to the same state. One listing of the meters serves the
// round: the meters already as wanted are not set again (each SetMeter lists the meters
// itself), and the pruning deletes those it shows that no port uses (nothing else adds a
// meter while bandwidthMu is held).
func (p *PodPorts) syncBandwidth(ctx context.Context) error {
	p.bandwidthMu.Lock()
	defer p.bandwidthMu.Unlock()
	have, dumpErr := p.dumpMeters(ctx)
	var errs []error
	var gen uint64
	for name, pp := range p.state.Pods() {
		before := pp
		if err := p.applyLimits(ctx, &pp, p.limitsOf(pp.Namespace, pp.Name, pp.UID), have); err != nil {
			errs = append(errs, err)
			continue
		}
		if pp.EgressMeter != before.EgressMeter || pp.IngressMeter != before.IngressMeter {
			gen = p.state.SetPod(name, pp)
		}
	}
	if gen != 0 {
		if err := p.syncer.WaitFor(ctx, gen); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if dumpErr != nil {
		return errors.Join(append(errs, dumpErr)...)
	}
	errs = append(errs, p.pruneMeters(ctx, have))
	return errors.Join(errs...)
}

// dumpMeters lists the bridge's meters by ID (none without a meter client).
func (p *PodPorts) dumpMeters(ctx context.Context) (map[uint32]ovs.Meter, error) {
	if p.meters == nil {
		return nil, nil
	}
	list, err := p.meters.DumpMeters(ctx)
	if err != nil {
		return nil, err
	}
	have := make(map[uint32]ovs.Meter, len(list))
	for _, m := range list {
		have[m.ID] = m
	}
	return have, nil
}

// pruneMeters deletes the meters of have that no pod in the desired state uses (br-int's
// meters are all kovs's: pod bandwidth limits, and the audit log's, which stays).
// Called with bandwidthMu held.
func (p *PodPorts) pruneMeters(ctx context.Context, have map[uint32]ovs.Meter) error {
	used := map[uint32]bool{pipeline.AuditMeterID: true}
	for _, pp := range p.state.Pods() {
		used[pp.EgressMeter], used[pp.IngressMeter] = true, true
	}
	var errs []error
	for id := range have {
		if !used[id] {
			errs = append(errs, p.meters.DeleteMeter(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// watchBandwidth resyncs the limits when a pod's bandwidth annotations change, and every
// bandwidthResync.
func (p *PodPorts) watchBandwidth(ctx context.Context, pods cache.SharedIndexInformer) error {
	r, err := runner.NewBoundedFrequencyRunner("pod bandwidth", func() {
		if err := p.syncBandwidth(ctx); err != nil {
			log.WithError(err).Warn("pod bandwidth limits not all applied")
		}
	}, runner.Bounds{MinInterval: 100 * time.Millisecond, MaxInterval: bandwidthResync, Burst: 2})
	if err != nil {
		return err
	}
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Pod)
			c, ok2 := cur.(*corev1.Pod)
			if !ok1 || !ok2 || bandwidthOf(o) != bandwidthOf(c) {
				r.Run()
			}
		},
	})
	if err != nil {
		return err
	}
	go r.Loop(ctx)
	r.Run()
	return nil
}

// bandwidthOf is a pod's two annotation values, to tell whether they changed.
func bandwidthOf(pod *corev1.Pod) [2]string {
	return [2]string{pod.Annotations[bandwidth.IngressAnnotation], pod.Annotations[bandwidth.EgressAnnotation]}
}
