package emulator

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerPortsDefaultTo80And81OnEveryProtocol(t *testing.T) {
	got := containerPorts(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}})
	if len(got) != 6 {
		t.Fatalf("default ports %v, want 80 and 81 on tcp, udp, sctp", got)
	}
	declared := containerPorts(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}})
	if len(declared) != 2 || declared[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("declared ports %v (protocol defaults to TCP)", declared)
	}
}

func TestMergeConditionsKeepsOtherOwnersConditions(t *testing.T) {
	old := []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse},
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	merged := mergeConditions(old, []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}})
	if len(merged) != 2 {
		t.Fatalf("merged %v", merged)
	}
	for _, c := range merged {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Errorf("Ready not updated: %v", c)
		}
	}
}

func TestStatusEqualIgnoresTimestamps(t *testing.T) {
	a := &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1, 0)}}}
	b := a.DeepCopy()
	b.Conditions[0].LastTransitionTime = metav1.Unix(2, 0)
	if !statusEqual(a, b) {
		t.Error("a status that differs only in timestamps should not be rewritten")
	}
	b.Conditions[0].Status = corev1.ConditionFalse
	if statusEqual(a, b) {
		t.Error("a changed condition must be written")
	}
}

func TestContainerIDIsStablePerUID(t *testing.T) {
	if containerID("uid-1") != containerID("uid-1") || containerID("uid-1") == containerID("uid-2") || len(containerID("x")) != 64 {
		t.Fatal("the sandbox ID must be a stable 64-hex-digit function of the pod UID")
	}
}

// The portMappings capability reaches the plugin as containerd's CRI plugin sends it:
// the Go field names of go-cni's PortMapping, lower-case protocols, only hostPorts.
func TestPortMappingsAsContainerdSendsThem(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 81}}},
		{Name: "b", Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP, HostIP: "172.30.0.1"}}},
	}}}
	b, err := json.Marshal(PodAttachment(pod, "/run/netns/x").runtimeConf().CapabilityArgs)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"portMappings":[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":""},` +
		`{"HostPort":5353,"ContainerPort":53,"Protocol":"udp","HostIP":"172.30.0.1"}]}`
	if string(b) != want {
		t.Errorf("capability args\n got %s\nwant %s", b, want)
	}
}
