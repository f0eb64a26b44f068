package ipam

import (
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// PodAddress is one address of a pod: its IP with the prefix length of the node
// block it comes from, and the block's gateway.
type PodAddress struct {
	// Address is the pod's IP with the block's prefix length, e.g. 10.244.1.5/24.
	Address netip.Prefix
	// Gateway is the block's gateway, e.g. 10.244.1.1.
	Gateway netip.Addr
}

// Family returns the family of the address.
func (a PodAddress) Family() Family { return FamilyOf(a.Address.Addr()) }

// PoolOptions tunes an AddressPool.
type PoolOptions struct {
	// Quarantine is how long a freed address is held back before reuse, even
	// if that leaves the pool with nothing to hand out. Zero: no quarantine.
	Quarantine time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// AddressPool hands out the pod addresses of one node block, one per pod key,
// back of the line (see the package documentation). The network address, the
// gateway (the first address) and, for IPv4, the broadcast address are never
// handed out. It is safe for concurrent use.
type AddressPool struct {
	block   netip.Prefix
	base    uint128
	gateway netip.Addr
	now     func() time.Time

	mu        sync.Mutex
	addresses indexPool // index = offset in the block
}

// NewAddressPool returns a pool of the pod addresses of a node block, which
// must be a masked prefix with at most 64 host bits and at least one usable
// address (IPv4 /30 or shorter, IPv6 /126 or shorter).
func NewAddressPool(block netip.Prefix, opts PoolOptions) (*AddressPool, error) {
	if err := validateBlock(block); err != nil {
		return nil, err
	}
	if opts.Quarantine < 0 {
		return nil, fmt.Errorf("negative quarantine %v for node block %s", opts.Quarantine, block)
	}
	f := FamilyOf(block.Addr())
	hostBits := uint(f.Bits() - block.Bits())
	first, size := uint64(2), (uint64(1)<<hostBits)-2 // skip network and gateway
	if hostBits == 64 {
		size = ^uint64(0) - 1 // offsets 2 .. 2^64-1
	}
	if f == IPv4 {
		size-- // and the broadcast address
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	base := addrToUint128(block.Addr())
	return &AddressPool{
		block:     block,
		base:      base,
		gateway:   base.add(1).addr(f),
		now:       opts.Now,
		addresses: newIndexPool(first, size, opts.Quarantine),
	}, nil
}

func validateBlock(block netip.Prefix) error {
	switch {
	case !block.IsValid():
		return fmt.Errorf("node block is not set")
	case block.Addr().Is4In6():
		return fmt.Errorf("node block %s is an IPv4-mapped IPv6 prefix: write it as IPv4", block)
	case block != block.Masked():
		return fmt.Errorf("node block %s has host bits set: use %s", block, block.Masked())
	}
	f := FamilyOf(block.Addr())
	switch {
	case block.Bits() > maxBlockBits(f):
		return fmt.Errorf("node block %s leaves no pod address: use /%d or shorter", block, maxBlockBits(f))
	case f == IPv6 && block.Bits() < minIPv6BlockBits:
		return fmt.Errorf("node block %s has more than 64 host bits: use /%d or longer", block, minIPv6BlockBits)
	}
	return nil
}

// Block returns the node block of the pool.
func (p *AddressPool) Block() netip.Prefix { return p.block }

// Gateway returns the block's gateway address, its first usable address.
func (p *AddressPool) Gateway() netip.Addr { return p.gateway }

// Family returns the family of the block.
func (p *AddressPool) Family() Family { return FamilyOf(p.block.Addr()) }

// Usable returns the number of addresses a pod can get from the block.
func (p *AddressPool) Usable() uint64 { return p.addresses.size }

// InUse returns the number of addresses held by pods.
func (p *AddressPool) InUse() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addresses.inUse()
}

// Allocate returns the pod's address, handing out a new one if it has none.
// When nothing can be handed out now it returns an *AddressExhaustedError.
func (p *AddressPool) Allocate(podKey string) (PodAddress, error) {
	a, _, err := p.allocate(podKey)
	return a, err
}

// allocate is Allocate that also says whether the address was handed out by this call.
func (p *AddressPool) allocate(podKey string) (addr PodAddress, fresh bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	i, fresh, ok := p.addresses.take(podKey, now)
	if !ok {
		w := p.addresses.wait()
		return PodAddress{}, false, &AddressExhaustedError{
			Block: p.block, Usable: p.addresses.size, InUse: w.inUse, Quarantined: w.waiting, ReadyAt: w.readyAt,
		}
	}
	return p.podAddress(i), fresh, nil
}

// Lookup returns the pod's address, if it has one.
func (p *AddressPool) Lookup(podKey string) (PodAddress, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.addresses.lookup(podKey)
	if !ok {
		return PodAddress{}, false
	}
	return p.podAddress(i), true
}

// Release frees the pod's address to the back of the line and returns it;
// false if the pod had none.
func (p *AddressPool) Release(podKey string) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.addresses.release(podKey, p.now())
	if !ok {
		return netip.Addr{}, false
	}
	return p.addrAt(i), true
}

// Restore records that the pod holds ip, as read from its kovs.io/pod-network
// annotation after a restart. Restoring a pod's own address again is a no-op.
// An address outside the block, reserved, held by another pod, or not the
// pod's only address in this block is refused with a *ConflictError.
func (p *AddressPool) Restore(podKey string, ip netip.Addr) error {
	conflict := func(reason ConflictReason, holder, detail string) error {
		return &ConflictError{Kind: "pod address", Owner: podKey, Claim: ip.String(), Reason: reason, Holder: holder, Detail: detail}
	}
	i, reserved, ok := p.offsetOf(ip)
	switch {
	case !ok:
		return conflict(ConflictOutside, "", fmt.Sprintf("outside node block %s", p.block))
	case reserved != "":
		return conflict(ConflictReserved, "", fmt.Sprintf("reserved as the %s of node block %s", reserved, p.block))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.addresses.restore(podKey, i, p.now())
	switch {
	case c == nil:
		return nil
	case c.reason == ConflictTaken:
		return conflict(c.reason, c.holder, fmt.Sprintf("already allocated to pod %q", c.holder))
	default:
		held := p.addrAt(c.held).String()
		return conflict(c.reason, held, fmt.Sprintf("the pod already holds %s in node block %s", held, p.block))
	}
}

// HighWater returns the highest address ever handed out or restored; false if
// none. A caller that records it can pass it to RestoreHighWater after a restart.
func (p *AddressPool) HighWater() (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.addresses.highWater()
	if !ok {
		return netip.Addr{}, false
	}
	return p.addrAt(i), true
}

// HighWaterAhead is the record that covers the next ahead addresses handed out from the
// never-used ones: ahead-1 past the next never-used address (ahead past HighWater once
// something was handed out), or the block's last usable address if that comes first.
// A caller records it before it hands out addresses up to it, so that a record is not
// needed for every address. ahead must be at least 1.
func (p *AddressPool) HighWaterAhead(ahead uint64) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.addresses.first + p.addresses.handed
	last := p.addresses.first + p.addresses.size - 1
	if next > last || last-next < ahead-1 {
		return p.addrAt(last)
	}
	return p.addrAt(next + ahead - 1)
}

// RestoreHighWater treats every address up to ip as handed out before the
// restart: those no pod holds are reused only after the never-used addresses
// above ip, and not within a quarantine from now.
func (p *AddressPool) RestoreHighWater(ip netip.Addr) error {
	i, reserved, ok := p.offsetOf(ip)
	if !ok || reserved != "" {
		return fmt.Errorf("high-water address %s is not a usable address of node block %s", ip, p.block)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addresses.restoreHighWater(i, p.now())
	return nil
}

// offsetOf returns ip's offset in the block, or what the address is reserved
// as; ok is false when ip is outside the block.
func (p *AddressPool) offsetOf(ip netip.Addr) (offset uint64, reserved string, ok bool) {
	if !p.block.Contains(ip) {
		return 0, "", false
	}
	offset = addrToUint128(ip).sub(p.base)
	switch {
	case offset == 0:
		return offset, "network address", true
	case offset == 1:
		return offset, "gateway", true
	case p.Family() == IPv4 && offset == p.addresses.first+p.addresses.size:
		return offset, "broadcast address", true
	}
	return offset, "", true
}

func (p *AddressPool) addrAt(offset uint64) netip.Addr { return p.base.add(offset).addr(p.Family()) }

func (p *AddressPool) podAddress(offset uint64) PodAddress {
	return PodAddress{Address: netip.PrefixFrom(p.addrAt(offset), p.block.Bits()), Gateway: p.gateway}
}
