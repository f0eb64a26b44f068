// Package addresses is the address side of kovs-controller: it gives every Node its
// subnets (annotation kovs.io/node-subnets), from the pure allocators of package ipam.
// State is rebuilt from those annotations on start, never from local files. Pod
// addresses are not the controller's: each node's kovs-agent hands them out from its
// node's blocks (package agent/podaddr), and the cluster learns them from the pods'
// status.podIPs.
package addresses

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// Config is the address plan.
type Config struct {
	// ClusterCIDRs with their node block sizes, at most one per family.
	ClusterCIDRs []ipam.ClusterCIDR
	// UseNodePodCIDRs takes node blocks from Node.spec.podCIDRs (kube-controller-manager
	// --allocate-node-cidrs) instead of allocating them.
	UseNodePodCIDRs bool
}

// Allocator holds the cluster's node blocks.
type Allocator struct {
	cfg     Config
	subnets *ipam.NodeSubnets

	mu     sync.Mutex
	blocks map[string][]netip.Prefix // by node name
}

// NewAllocator validates the plan.
func NewAllocator(cfg Config) (*Allocator, error) {
	subnets, err := ipam.NewNodeSubnets(cfg.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	return &Allocator{cfg: cfg, subnets: subnets, blocks: map[string][]netip.Prefix{}}, nil
}

// setNodeBlocks records the node's blocks.
func (a *Allocator) setNodeBlocks(node string, blocks []netip.Prefix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.blocks[node] = slices.Clone(blocks)
}

// dropNode forgets a deleted node's blocks (and frees them, unless they are the Node's
// spec.podCIDRs).
func (a *Allocator) dropNode(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.blocks, node)
	if !a.cfg.UseNodePodCIDRs {
		a.subnets.Release(node)
	}
}
