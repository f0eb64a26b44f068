package agent

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// The limits follow the pod's annotations: in place at attach, before the pod's flows;
// changed, removed and made unusable while the pod runs; gone with the port; and a resync
// deletes a meter nothing uses.
func TestBandwidthFollowsAnnotations(t *testing.T) {
	meters := ovsfake.NewOpenFlow()
	r, pod := attachLimitedC(t, meters)
	store := r.ports.store
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ofport := r.state.Pods()["veth-c"].OFPort
	check := func(step string, ingress, egress uint32) {
		t.Helper()
		have, _ := meters.DumpMeters(ctx)
		var want []ovs.Meter
		if egress != 0 {
			want = append(want, ovs.Meter{ID: ofport, RateKbps: egress, BurstKbits: max(egress/2, meterBurstMin)})
		}
		if ingress != 0 {
			want = append(want, ovs.Meter{ID: ingressMeterBase + ofport, RateKbps: ingress, BurstKbits: max(ingress/2, meterBurstMin)})
		}
		if !slices.Equal(have, want) {
			t.Errorf("%s: meters %+v, want %+v", step, have, want)
		}
		pp := r.state.Pods()["veth-c"]
		if (pp.EgressMeter != 0) != (egress != 0) || (pp.IngressMeter != 0) != (ingress != 0) {
			t.Errorf("%s: the pod's flows use meters %d (egress) and %d (ingress)", step, pp.EgressMeter, pp.IngressMeter)
		}
		for _, m := range want {
			if !r.hasFlowWith("meter:" + strconv.FormatUint(uint64(m.ID), 10)) {
				t.Errorf("%s: no installed flow applies meter %d", step, m.ID)
			}
		}
		if len(want) == 0 && r.hasFlowWith("meter:") {
			t.Errorf("%s: an installed flow still applies a meter", step)
		}
	}
	check("attach", 10_000, 20_000)
	pod.Annotations[bandwidth.EgressAnnotation] = "1M"
	delete(pod.Annotations, bandwidth.IngressAnnotation)
	if err := r.ports.syncBandwidth(ctx); err != nil {
		t.Fatal(err)
	}
	check("changed", 0, 1_000)
	pod.Annotations[bandwidth.EgressAnnotation] = "1 Mbit"
	if err := r.ports.syncBandwidth(ctx); err != nil {
		t.Fatal(err)
	}
	check("unusable value", 0, 0)
	if err := meters.SetMeter(ctx, ovs.Meter{ID: 99, RateKbps: 1, BurstKbits: 1}); err != nil { // left by an earlier agent
		t.Fatal(err)
	}
	pod.Annotations[bandwidth.EgressAnnotation] = "3M"
	pod.Annotations[bandwidth.IngressAnnotation] = "4M"
	if err := r.ports.syncBandwidth(ctx); err != nil {
		t.Fatal(err)
	}
	check("set again, stale meter pruned", 4_000, 3_000)
	if err := r.ports.Detach(ctx, cni.DetachRequest{ContainerID: "sandbox-c", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if have, _ := meters.DumpMeters(ctx); len(have) != 0 {
		t.Errorf("after detach: meters %+v", have)
	}
	if _, ok := store.(*ovsfake.OVSDB).Port("br-int", "veth-c"); ok {
		t.Error("after detach: the port is still there")
	}
}

func (r *attachRig) hasFlowWith(part string) bool {
	for _, e := range r.sw.Flows() {
		if strings.Contains(e.String(), part) {
			return true
		}
	}
	return false
}

// A restarted agent restores a limited pod with its meters in the desired state, and the
// meters in place, before its first flow sync: the pod's flows never lose them.
func TestRestoreKeepsTheMeters(t *testing.T) {
	ctx := context.Background()
	store := ovsfake.NewOVSDB()
	if err := store.EnsureBridge(ctx, ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev}); err != nil {
		t.Fatal(err)
	}
	req := attachOf("c", 12)
	ofport, err := store.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: req.HostIfName, ExternalIDs: portIDs(req)})
	if err != nil {
		t.Fatal(err)
	}
	pods := podsOnNode(t, "c")
	pod, err := pods.Pods("x").Get("c")
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{bandwidth.EgressAnnotation: "5M", bandwidth.IngressAnnotation: "7M"}
	state := NewNodeState(1, nil)
	state.SetNode(testNodeConfig())
	meters := ovsfake.NewOpenFlow()
	p := &PodPorts{bridge: "br-int", store: store, state: state, pods: pods, meters: meters}
	if n, _, err := p.restore(ctx); err != nil || n != 1 {
		t.Fatalf("restore: %d, %v", n, err)
	}
	pp := state.Pods()[req.HostIfName]
	id := uint32(ofport)
	if pp.EgressMeter != id || pp.IngressMeter != ingressMeterBase+id {
		t.Errorf("restored pod's meters: egress %d, ingress %d", pp.EgressMeter, pp.IngressMeter)
	}
	have, _ := meters.DumpMeters(ctx)
	want := []ovs.Meter{podMeter(id, 5_000_000), podMeter(ingressMeterBase+id, 7_000_000)}
	if !slices.Equal(have, want) {
		t.Errorf("meters after restore: %+v, want %+v", have, want)
	}
}

// countingMeters counts the calls to a MeterClient.
type countingMeters struct {
	ovs.MeterClient
	sets, dumps int
}

func (c *countingMeters) SetMeter(ctx context.Context, m ovs.Meter) error {
	c.sets++
	return c.MeterClient.SetMeter(ctx, m)
}

func (c *countingMeters) DumpMeters(ctx context.Context) ([]ovs.Meter, error) {
	c.dumps++
	return c.MeterClient.DumpMeters(ctx)
}

// A periodic resync of limits that have not changed lists the meters once and sets none:
// it runs every bandwidthResync for every limited pod, and each SetMeter lists the meters
// itself (ovs-ofctl dump-meters).
func TestBandwidthResyncSetsNothingUnchanged(t *testing.T) {
	meters := &countingMeters{MeterClient: ovsfake.NewOpenFlow()}
	r, _ := attachLimitedC(t, meters)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meters.sets, meters.dumps = 0, 0
	if err := r.ports.syncBandwidth(ctx); err != nil {
		t.Fatal(err)
	}
	if meters.sets != 0 || meters.dumps != 1 {
		t.Errorf("a resync of unchanged limits: %d SetMeter, %d DumpMeters; want 0 and 1", meters.sets, meters.dumps)
	}
	if have, _ := meters.DumpMeters(ctx); len(have) != 2 {
		t.Errorf("after the resync: meters %+v", have)
	}
}

// attachLimitedC attaches pod x/c, annotated ingress 10M and egress 20M, in a rig without
// policy whose meters are kept by meters; it returns the rig and the pod.
func attachLimitedC(t *testing.T, meters ovs.MeterClient) (*attachRig, *corev1.Pod) {
	t.Helper()
	r := newAttachRig(t, time.Hour)
	r.state.mu.Lock()
	r.state.policy = nil
	r.state.mu.Unlock()
	r.ports.meters = meters
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.ports.pods = podsOnNode(t, "c")
	pod, err := r.ports.pods.Pods("x").Get("c")
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{bandwidth.IngressAnnotation: "10M", bandwidth.EgressAnnotation: "20M"}
	if _, err := r.ports.Add(ctx, addC()); err != nil {
		t.Fatal(err)
	}
	return r, pod
}

// TestBandwidthResyncKeepsTheAuditMeter: the bandwidth resync prunes meters no pod uses,
// but not the audit log's (the agent creates it at start; without it the copies of logged
// packets are not sent).
func TestBandwidthResyncKeepsTheAuditMeter(t *testing.T) {
	meters := ovsfake.NewOpenFlow()
	r, _ := attachLimitedC(t, meters)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	auditMeter := ovs.Meter{ID: pipeline.AuditMeterID, RateKbps: 3000, BurstKbits: 3000, Packets: true}
	if err := meters.SetMeter(ctx, auditMeter); err != nil {
		t.Fatal(err)
	}
	if err := r.ports.syncBandwidth(ctx); err != nil {
		t.Fatal(err)
	}
	have, _ := meters.DumpMeters(ctx)
	if !slices.Contains(have, auditMeter) {
		t.Errorf("after a bandwidth resync: meters %+v, want the audit meter kept", have)
	}
}
