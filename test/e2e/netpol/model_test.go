package netpol_test

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The cluster model of the upstream Kubernetes NetworkPolicy e2e tests: namespaces x, y, z
// labelled ns=<name>, each with pods a, b, c labelled pod=<name>, serving 80 and 81 on TCP,
// UDP and SCTP under the names serve-<port>-<proto>. kovs spreads them over three nodes so
// every case crosses nodes.
var (
	modelNamespaces = []string{"x", "y", "z"}
	modelPods       = []string{"a", "b", "c"}
)

// ModelPod is one pod of a case's cluster.
type ModelPod struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Node      string            `json:"node,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// HostNetwork runs the pod in its node's network namespace (address: the node's);
	// probes from it leave from the node. At most one per node and port.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Ports replaces the standard serve-* ports when set.
	Ports []ModelPort `json:"ports,omitempty"`
}

// ModelPort is a named container port.
type ModelPort struct {
	Name     string `json:"name"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}

// Key is namespace/name.
func (p ModelPod) Key() string { return p.Namespace + "/" + p.Name }

func standardPods() []ModelPod {
	var pods []ModelPod
	i := 0
	for _, ns := range modelNamespaces {
		for _, name := range modelPods {
			pods = append(pods, ModelPod{Namespace: ns, Name: name, Node: fmt.Sprintf("node%d", i%3+1),
				Labels: map[string]string{"pod": name}})
			i++
		}
	}
	return pods
}

func (p ModelPod) containerPorts() []corev1.ContainerPort {
	if len(p.Ports) > 0 {
		var out []corev1.ContainerPort
		for _, mp := range p.Ports {
			proto := corev1.Protocol(strings.ToUpper(mp.Protocol))
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out = append(out, corev1.ContainerPort{Name: mp.Name, ContainerPort: mp.Port, Protocol: proto})
		}
		return out
	}
	var out []corev1.ContainerPort
	for _, port := range []int32{80, 81} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
			out = append(out, corev1.ContainerPort{Name: fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto))),
				ContainerPort: port, Protocol: proto})
		}
	}
	return out
}

func sortedKeys(pods []ModelPod) []string {
	var keys []string
	for _, p := range pods {
		keys = append(keys, p.Key())
	}
	sort.Strings(keys)
	return keys
}
