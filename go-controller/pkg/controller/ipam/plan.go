package ipam

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// Range is a named address range of an address plan: a cluster CIDR, a Service CIDR, the
// nodes' network or one node's address.
type Range struct {
	Name   string // what it is, e.g. "cluster CIDR", "Service CIDR kubernetes", "node node1"
	Prefix netip.Prefix
}

func (r Range) String() string { return fmt.Sprintf("%s %s", r.Name, r.Prefix) }

// Overlap is two ranges of a plan that share addresses.
type Overlap struct{ A, B Range }

func (o Overlap) String() string { return fmt.Sprintf("%s overlaps %s", o.A, o.B) }

// Overlaps lists every pair of ranges that share addresses, in input order. Ranges with
// the same name and prefix (one node reporting an address twice) are not compared.
func Overlaps(ranges []Range) []Overlap {
	var out []Overlap
	for i, a := range ranges {
		for _, b := range ranges[i+1:] {
			if a == b || !a.Prefix.Overlaps(b.Prefix) {
				continue
			}
			out = append(out, Overlap{A: a, B: b})
		}
	}
	return out
}

// CheckClusterCIDRs refuses cluster CIDRs that share addresses with any of others (the
// Service CIDRs, the nodes' addresses): the error names both ranges of every overlap.
func CheckClusterCIDRs(cluster []ClusterCIDR, others []Range) error {
	ranges := make([]Range, 0, len(cluster)+len(others))
	for _, c := range cluster {
		ranges = append(ranges, Range{Name: "cluster CIDR", Prefix: c.CIDR})
	}
	var msgs []string
	for _, o := range Overlaps(append(ranges, others...)) {
		if o.A.Name == "cluster CIDR" && o.B.Name != "cluster CIDR" {
			msgs = append(msgs, o.String())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("the address plan collides: %s: pod, Service and node addresses must not overlap, choose cluster CIDRs outside the others",
		strings.Join(msgs, "; "))
}

// FamilyPlan is the arithmetic of one family of an address plan.
type FamilyPlan struct {
	Family  Family
	Cluster ClusterCIDR
	// NodeCap is how many nodes get a block: 2^(block bits - cluster bits).
	NodeCap uint64
	// BlockPods is how many pod addresses a block has (network, gateway and, for IPv4,
	// broadcast excluded); saturated at math.MaxUint64.
	BlockPods uint64
	// PodsPerNode is the lower of BlockPods and the node's max pods (MaxPods, when set);
	// BoundBy says which: "block" or "max pods".
	PodsPerNode uint64
	BoundBy     string
	// PodCapacity is NodeCap * PodsPerNode, saturated (Saturated tells).
	PodCapacity uint64
	Saturated   bool
}

// PlanFamily does a family's arithmetic for a cluster CIDR (valid) and the nodes' max pods
// (0: unknown, only the block binds).
func PlanFamily(c ClusterCIDR, maxPods int) FamilyPlan {
	f := c.Family()
	p := FamilyPlan{Family: f, Cluster: c, NodeCap: c.Capacity(), BlockPods: BlockPodCount(c.Family(), c.BlockBits),
		BoundBy: "block"}
	p.PodsPerNode = p.BlockPods
	if maxPods > 0 && uint64(maxPods) < p.BlockPods {
		p.PodsPerNode, p.BoundBy = uint64(maxPods), "max pods"
	}
	total := new(big.Int).Mul(new(big.Int).SetUint64(p.NodeCap), new(big.Int).SetUint64(p.PodsPerNode))
	if total.IsUint64() {
		p.PodCapacity = total.Uint64()
	} else {
		p.PodCapacity, p.Saturated = math.MaxUint64, true
	}
	return p
}

// BlockPodCount is how many pods a node block of the family and prefix length holds:
// its addresses less the network address, the gateway and, for IPv4, the broadcast
// address (as NewAddressPool hands them out; saturated at math.MaxUint64).
func BlockPodCount(f Family, blockBits int) uint64 {
	host := f.Bits() - blockBits
	if host >= 64 {
		return math.MaxUint64 - 1
	}
	n := uint64(1)<<uint(host) - 2
	if f == IPv4 {
		n--
	}
	return n
}

// OversizedMaxPods lists nodes whose max pods exceed what their block holds, by name.
func OversizedMaxPods(maxPods map[string]int, blocks map[string][]netip.Prefix) []string {
	var out []string
	for node, m := range maxPods {
		for _, b := range blocks[node] {
			if uint64(m) > BlockPodCount(FamilyOf(b.Addr()), b.Bits()) {
				out = append(out, fmt.Sprintf("%s: max pods %d, block %s holds %d", node, m, b, BlockPodCount(FamilyOf(b.Addr()), b.Bits())))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
