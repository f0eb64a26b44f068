package clusterpolicy

import (
	"net/netip"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Cluster is what ClusterNetworkPolicy selects from: the namespaces' labels, the
// selectable pods (neither host-network nor terminated) and the nodes.
type Cluster struct {
	// Namespaces maps each namespace's name to its labels.
	Namespaces map[string]map[string]string
	Pods       []Pod
	Nodes      []Node
}

// Pod is a selectable pod: its identity, labels, addresses and named container ports.
type Pod struct {
	policy.PodKey
	Labels map[string]string
	IPs    []netip.Addr
	Ports  []NamedPort
	Node   string
}

// NamedPort is a named container port.
type NamedPort struct {
	Name     string
	Protocol policy.Protocol
	Number   int32
}

// Node is a node as the Nodes peer sees it: its labels and the addresses of its
// status.addresses.
type Node struct {
	Name   string
	Labels map[string]string
	IPs    []netip.Addr
}

// resolve returns the number the pod gives the named port for protocol, if any.
func (p *Pod) resolve(name string) []policy.Port {
	var ports []policy.Port
	for _, np := range p.Ports {
		if np.Name == name {
			ports = append(ports, policy.Port{Protocol: np.Protocol, Port: np.Number})
		}
	}
	return ports
}
