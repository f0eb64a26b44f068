package pipeline

import (
	"strings"
	"testing"
)

// A pod with an egress meter: its classification passes every packet through the meter
// first (and only its own), and the packet goes on exactly as without one.
func TestPodEgressMeter(t *testing.T) {
	sc := oneNodeTwoPods()
	plain := sc.tracer(t)
	web, client := sc.pods[0], sc.pods[1]
	sc.pods[0].EgressMeter = web.OFPort
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	flows, err := b.PodFlows(sc.pods[0])
	if err != nil {
		t.Fatal(err)
	}
	var classify []string
	for _, f := range flows {
		if f.Table == Classifier {
			classify = append(classify, f.String())
		}
	}
	if len(classify) != 1 || !strings.Contains(classify[0], "in_port=3 actions=meter:3,set_field:") {
		t.Fatalf("classification of a metered pod: %q", classify)
	}
	others, err := b.PodFlows(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range others {
		if strings.Contains(f.String(), "meter:") {
			t.Errorf("an unmetered pod's flow has a meter: %s", f)
		}
	}
	metered := sc.tracer(t)
	pkt := fromPod(t, sc.pods[0], sc.node, client.IPs[0])
	want, err := plain.Trace(pkt, CTNew)
	if err != nil {
		t.Fatal(err)
	}
	got, err := metered.Trace(pkt, CTNew)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dropped() || len(got.Outputs) != len(want.Outputs) || got.Outputs[0].Port != client.OFPort {
		t.Errorf("metered pod to client: %s\nwithout the meter: %s", got, want)
	}
}
