package ipam

import (
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// SubnetAllocator hands out the node blocks of one cluster CIDR, one block per
// node, back of the line: a released block is not reused while a never-used or
// longer-freed one remains, so routes to a deleted node's block have time to
// go before the block reappears elsewhere. It is safe for concurrent use.
type SubnetAllocator struct {
	cidr  ClusterCIDR
	base  uint128
	shift uint // host bits of a block

	mu     sync.Mutex
	blocks indexPool
}

// NewSubnetAllocator returns an allocator of the node blocks of cidr.
func NewSubnetAllocator(cidr ClusterCIDR) (*SubnetAllocator, error) {
	if err := cidr.Validate(); err != nil {
		return nil, fmt.Errorf("invalid cluster CIDR plan: %w", err)
	}
	return &SubnetAllocator{
		cidr:   cidr,
		base:   addrToUint128(cidr.CIDR.Addr()),
		shift:  uint(cidr.Family().Bits() - cidr.BlockBits),
		blocks: newIndexPool(0, cidr.Capacity(), 0),
	}, nil
}

// ClusterCIDR returns the cluster CIDR and block size the allocator carves.
func (a *SubnetAllocator) ClusterCIDR() ClusterCIDR { return a.cidr }

// Family returns the address family of the allocator's blocks.
func (a *SubnetAllocator) Family() Family { return a.cidr.Family() }

// Capacity returns the number of node blocks, the node cap of the cluster CIDR.
func (a *SubnetAllocator) Capacity() uint64 { return a.cidr.Capacity() }

// InUse returns the number of blocks held by nodes.
func (a *SubnetAllocator) InUse() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.blocks.inUse()
}

// Allocate returns the node's block, handing out a new one if the node has
// none. When every block is held it returns a *SubnetExhaustedError.
func (a *SubnetAllocator) Allocate(node string) (netip.Prefix, error) {
	block, _, err := a.allocate(node)
	return block, err
}

// allocate is Allocate that also says whether the block was handed out by this call.
func (a *SubnetAllocator) allocate(node string) (block netip.Prefix, fresh bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, fresh, ok := a.blocks.take(node, time.Time{})
	if !ok {
		return netip.Prefix{}, false, &SubnetExhaustedError{ClusterCIDR: a.cidr}
	}
	return a.blockAt(i), fresh, nil
}

// Lookup returns the node's block, if it has one.
func (a *SubnetAllocator) Lookup(node string) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.blocks.lookup(node)
	if !ok {
		return netip.Prefix{}, false
	}
	return a.blockAt(i), true
}

// Release frees the node's block and returns it; false if the node had none.
func (a *SubnetAllocator) Release(node string) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.blocks.release(node, time.Time{})
	if !ok {
		return netip.Prefix{}, false
	}
	return a.blockAt(i), true
}

// Restore records that node holds block, as read from its kovs.io/node-subnets
// annotation after a restart. Restoring a node's own block again is a no-op.
// A block that is outside the cluster CIDR, of the wrong size, not a block
// boundary, held by another node, or not the node's only block of this family
// is refused with a *ConflictError.
func (a *SubnetAllocator) Restore(node string, block netip.Prefix) error {
	conflict := func(reason ConflictReason, holder, detail string) error {
		return &ConflictError{Kind: "node block", Owner: node, Claim: block.String(), Reason: reason, Holder: holder, Detail: detail}
	}
	switch {
	case !block.IsValid() || block.Addr().Is4In6() || !a.cidr.CIDR.Contains(block.Addr()) || block.Bits() < a.cidr.CIDR.Bits():
		return conflict(ConflictOutside, "", fmt.Sprintf("outside cluster CIDR %s", a.cidr.CIDR))
	case block.Bits() != a.cidr.BlockBits:
		return conflict(ConflictWrongSize, "", fmt.Sprintf("wrong size: cluster CIDR %s is carved into /%d blocks", a.cidr.CIDR, a.cidr.BlockBits))
	case block != block.Masked():
		return conflict(ConflictMisaligned, "", fmt.Sprintf("not a block boundary (host bits set): the block would be %s", block.Masked()))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.blocks.restore(node, a.indexOf(block), time.Time{})
	switch {
	case c == nil:
		return nil
	case c.reason == ConflictTaken:
		return conflict(c.reason, c.holder, fmt.Sprintf("already allocated to node %q", c.holder))
	default:
		held := a.blockAt(c.held).String()
		return conflict(c.reason, held, fmt.Sprintf("the node already holds %s block %s", a.Family(), held))
	}
}

// HighWater returns the highest block ever handed out or restored; false if none.
// A caller that records it can pass it to RestoreHighWater after a restart.
func (a *SubnetAllocator) HighWater() (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.blocks.highWater()
	if !ok {
		return netip.Prefix{}, false
	}
	return a.blockAt(i), true
}

// RestoreHighWater treats every block up to block as handed out before the
// restart: those no node holds are reused only after the never-used blocks
// above it, so a block freed just before a restart is not reused at once.
func (a *SubnetAllocator) RestoreHighWater(block netip.Prefix) error {
	if !block.IsValid() || block.Addr().Is4In6() || !a.cidr.CIDR.Contains(block.Addr()) ||
		block.Bits() != a.cidr.BlockBits || block != block.Masked() {
		return fmt.Errorf("high-water block %s is not a /%d block of cluster CIDR %s", block, a.cidr.BlockBits, a.cidr.CIDR)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.blocks.restoreHighWater(a.indexOf(block), time.Time{})
	return nil
}

func (a *SubnetAllocator) blockAt(i uint64) netip.Prefix {
	return netip.PrefixFrom(a.base.or(shl(i, a.shift)).addr(a.Family()), a.cidr.BlockBits)
}

// indexOf returns the index of a block known to be a block of the CIDR.
func (a *SubnetAllocator) indexOf(block netip.Prefix) uint64 {
	return addrToUint128(block.Addr()).shr(a.shift) & (a.Capacity() - 1)
}
