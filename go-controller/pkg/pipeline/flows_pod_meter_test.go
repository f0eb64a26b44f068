package pipeline

import (
	"strings"
	"testing"
)

// A pod with meters: its classification passes every packet it sends through its egress
// meter first, what is output to it passes its ingress meter last (only its own), and the
// packets go on exactly as without them.
func TestPodMeters(t *testing.T) {
	sc := oneNodeTwoPods()
	plain := sc.tracer(t)
	web, client := sc.pods[0], sc.pods[1]
	sc.pods[0].EgressMeter = web.OFPort
	sc.pods[0].IngressMeter = 65536 + web.OFPort
	b, err := NewBuilder(sc.node, testRound)
	if err != nil {
		t.Fatal(err)
	}
	flows, err := b.PodFlows(sc.pods[0])
	if err != nil {
		t.Fatal(err)
	}
	var classify, output []string
	for _, f := range flows {
		switch f.Table {
		case Classifier:
			classify = append(classify, f.String())
		case Output:
			output = append(output, f.String())
		}
	}
	if len(classify) != 1 || !strings.Contains(classify[0], "in_port=3 actions=meter:3,set_field:") {
		t.Fatalf("classification of a metered pod: %q", classify)
	}
	if len(output) != 1 || !strings.Contains(output[0], "reg1=0x3 actions=meter:65539,output:NXM_NX_REG1[]") {
		t.Fatalf("output to a metered pod: %q", output)
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
	back := fromPod(t, client, sc.node, sc.pods[0].IPs[0])
	got, err = metered.Trace(back, CTNew)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dropped() || got.Outputs[0].Port != web.OFPort || !strings.Contains(got.String(), "meter:65539") {
		t.Errorf("client to metered pod: %s", got)
	}
}
