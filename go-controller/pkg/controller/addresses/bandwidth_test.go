package addresses

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
)

// An unusable annotation gets one Warning Event naming it, its value and what is accepted,
// again only when the value (or the pod) changes.
func TestBandwidthWarnings(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	w := &BandwidthWarnings{Recorder: rec}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", UID: "u1",
		Annotations: map[string]string{bandwidth.EgressAnnotation: "10Mbps"}}}
	w.Check(pod)
	w.Check(pod)
	pod.Annotations[bandwidth.EgressAnnotation] = "100T"
	w.Check(pod)
	pod.Annotations[bandwidth.EgressAnnotation] = "10M"
	w.Check(pod)
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 2 {
		t.Fatalf("events %q, want two", events)
	}
	for _, want := range []string{"Warning", ReasonInvalidBandwidth, bandwidth.EgressAnnotation, `"10Mbps"`, "10M, 500k or 1G", "not limited"} {
		if !strings.Contains(events[0], want) {
			t.Errorf("event %q does not say %q", events[0], want)
		}
	}
	if !strings.Contains(events[1], "32G") {
		t.Errorf("event %q does not give the upper bound", events[1])
	}
}
