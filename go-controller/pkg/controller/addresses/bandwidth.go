package addresses

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
)

// ReasonInvalidBandwidth is the Event reason for a bandwidth annotation kovs cannot apply:
// the pod runs, and that direction is not limited (docs/egress.md#pod-bandwidth).
const ReasonInvalidBandwidth = "InvalidBandwidth"

// BandwidthWarnings reports pods whose bandwidth annotations are unusable, with a Warning
// Event on the pod, once per pod and value (the agents, which apply the limits, log it).
type BandwidthWarnings struct {
	Recorder record.EventRecorder
	mu       sync.Mutex
	reported map[string]string // namespace/name -> the pod UID and error reported
}

// Check reports the pod's annotations if they are unusable and were not reported yet.
func (w *BandwidthWarnings) Check(pod *corev1.Pod) {
	_, err := bandwidth.FromAnnotations(pod.Annotations)
	w.mu.Lock()
	defer w.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	if err == nil {
		delete(w.reported, key)
		return
	}
	seen := string(pod.UID) + " " + err.Error()
	if w.reported[key] == seen {
		return
	}
	if w.reported == nil {
		w.reported = map[string]string{}
	}
	w.reported[key] = seen
	w.Recorder.Event(pod, corev1.EventTypeWarning, ReasonInvalidBandwidth,
		err.Error()+"; that direction of the pod is not limited")
}

// Forget drops what was reported for a pod (namespace/name) that is gone.
func (w *BandwidthWarnings) Forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.reported, key)
}
