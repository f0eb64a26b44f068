package networkpolicy

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// selectable reports whether NetworkPolicy can select the pod, as applied-to pod or as
// peer: host-network pods (whose address is the node's) and terminated pods never are.
func selectable(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// podIPs returns the pod's addresses from its status.podIPs (status.podIP when a kubelet
// only set that): the node's agent allocated them and the runtime reported them through
// kubelet. An annotation on the pod is never read: no one but the pod's own node says
// which addresses it has.
func podIPs(p *corev1.Pod) []netip.Addr {
	ips := make([]netip.Addr, 0, len(p.Status.PodIPs))
	for _, s := range p.Status.PodIPs {
		if ip, err := netip.ParseAddr(s.IP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

// podNamedPorts returns the named ports of the pod's containers (protocol defaulting to
// TCP). Init containers are not listed: their ports are not served for the pod's life.
func podNamedPorts(p *corev1.Pod) []namedPort {
	var ports []namedPort
	for i := range p.Spec.Containers {
		for _, cp := range p.Spec.Containers[i].Ports {
			if cp.Name == "" {
				continue
			}
			proto := policy.Protocol(cp.Protocol)
			if proto == "" {
				proto = policy.TCP
			}
			ports = append(ports, namedPort{name: cp.Name, protocol: proto, number: cp.ContainerPort})
		}
	}
	return ports
}

// resolves reports whether the pod gives one of names, for protocol, the number.
func (p *pod) resolves(protocol policy.Protocol, names []string, number int32) bool {
	for _, np := range p.ports {
		if np.protocol == protocol && np.number == number && slices.Contains(names, np.name) {
			return true
		}
	}
	return false
}

// appendResolved appends the numbers the pod gives names for protocol.
func (p *pod) appendResolved(numbers []int32, protocol policy.Protocol, names []string) []int32 {
	for _, np := range p.ports {
		if np.protocol == protocol && slices.Contains(names, np.name) {
			numbers = append(numbers, np.number)
		}
	}
	return numbers
}

func (p *pod) nodeName() string {
	if p.node == nil {
		return ""
	}
	return p.node.name
}

// ref returns the pod as a member of an applied-to set.
func (p *pod) ref() policy.AppliedPod {
	return policy.AppliedPod{PodKey: p.apiKey(), IPs: p.ips}
}

func (p *pod) apiKey() policy.PodKey {
	return policy.PodKey{Namespace: p.key.Namespace, Name: p.key.Name, UID: p.uid}
}

func (p *pod) memberOf(g *group) bool {
	return slices.Contains(p.groups, g)
}

func (p *pod) leave(g *group) {
	if i := slices.Index(p.groups, g); i >= 0 {
		last := len(p.groups) - 1
		p.groups[i] = p.groups[last]
		p.groups[last] = nil
		p.groups = p.groups[:last]
	}
}
