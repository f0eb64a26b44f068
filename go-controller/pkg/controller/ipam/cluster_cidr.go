package ipam

import (
	"fmt"
	"net/netip"
)

// Family is an IP address family.
type Family int

const (
	// IPv4 is the IPv4 address family.
	IPv4 Family = 4
	// IPv6 is the IPv6 address family.
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// Bits returns the address length of the family in bits.
func (f Family) Bits() int {
	if f == IPv4 {
		return 32
	}
	return 128
}

// FamilyOf returns the family of a, treating IPv4-mapped IPv6 addresses as IPv6.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Limits of the node block size, per family. IPv4 blocks lose three addresses
// (network, gateway, broadcast) and IPv6 blocks two (network, gateway); a block
// must keep at least one pod address. IPv6 blocks have at most 64 host bits so
// that an address's offset in its block fits a uint64.
const (
	maxIPv4BlockBits = 30
	maxIPv6BlockBits = 126
	minIPv6BlockBits = 64
	// maxBlockIndexBits bounds block bits minus CIDR bits, so that the node cap
	// of a cluster CIDR fits a uint64.
	maxBlockIndexBits = 63
)

// ClusterCIDR is one cluster CIDR and the size of the node blocks carved out of it.
type ClusterCIDR struct {
	// CIDR is the cluster CIDR, e.g. 10.244.0.0/16.
	CIDR netip.Prefix
	// BlockBits is the prefix length of each node's block, e.g. 24 for /24.
	BlockBits int
}

// DefaultBlockBits returns the default node block size of a family: /24 for
// IPv4, /64 for IPv6.
func DefaultBlockBits(f Family) int {
	if f == IPv4 {
		return 24
	}
	return 64
}

// DefaultClusterCIDR returns the default cluster CIDR of a family:
// 10.244.0.0/16 with /24 blocks, or fd00:10:244::/48 with /64 blocks.
func DefaultClusterCIDR(f Family) ClusterCIDR {
	if f == IPv4 {
		return ClusterCIDR{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockBits: 24}
	}
	return ClusterCIDR{CIDR: netip.MustParsePrefix("fd00:10:244::/48"), BlockBits: 64}
}

// ParseClusterCIDR parses a cluster CIDR and validates it with its block size.
// A blockBits of 0 selects the family's default.
func ParseClusterCIDR(cidr string, blockBits int) (ClusterCIDR, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ClusterCIDR{}, fmt.Errorf("parse cluster CIDR %q: %w", cidr, err)
	}
	c := ClusterCIDR{CIDR: p, BlockBits: blockBits}
	if c.BlockBits == 0 {
		c.BlockBits = DefaultBlockBits(c.Family())
	}
	if err := c.Validate(); err != nil {
		return ClusterCIDR{}, err
	}
	return c, nil
}

// Family returns the family of the cluster CIDR.
func (c ClusterCIDR) Family() Family { return FamilyOf(c.CIDR.Addr()) }

// String returns the CIDR and block size, e.g. "10.244.0.0/16 (/24 blocks)".
func (c ClusterCIDR) String() string {
	return fmt.Sprintf("%s (/%d blocks)", c.CIDR, c.BlockBits)
}

// Capacity returns the number of node blocks in the cluster CIDR, which is the
// node cap the CIDR plan implies: 2^(BlockBits - CIDR bits). It is meaningful
// only for a valid ClusterCIDR.
func (c ClusterCIDR) Capacity() uint64 {
	return uint64(1) << uint(c.BlockBits-c.CIDR.Bits())
}

// Validate reports whether the cluster CIDR and its block size make a usable
// plan, with an error that says what to change.
func (c ClusterCIDR) Validate() error {
	if !c.CIDR.IsValid() {
		return fmt.Errorf("cluster CIDR is not set")
	}
	addr := c.CIDR.Addr()
	if addr.Is4In6() {
		return fmt.Errorf("cluster CIDR %s is an IPv4-mapped IPv6 prefix: write it as an IPv4 CIDR", c.CIDR)
	}
	if c.CIDR != c.CIDR.Masked() {
		return fmt.Errorf("cluster CIDR %s has host bits set: use %s", c.CIDR, c.CIDR.Masked())
	}
	lo, hi := c.blockBitsRange()
	if maxBits := maxBlockBits(c.Family()); c.CIDR.Bits() > maxBits {
		return fmt.Errorf("cluster CIDR %s is too small for a node block: use a prefix of /%d or shorter", c.CIDR, maxBits)
	}
	if lo > hi {
		return fmt.Errorf("cluster CIDR %s is too large: node blocks are counted in %d bits, use a prefix of /%d or longer",
			c.CIDR, maxBlockIndexBits, lo-maxBlockIndexBits)
	}
	hint := fmt.Sprintf("use a block size between /%d and /%d, e.g. /%d", lo, hi, clamp(DefaultBlockBits(c.Family()), lo, hi))
	switch b := c.BlockBits; {
	case b == 0:
		return fmt.Errorf("node block size of cluster CIDR %s is not set: %s", c.CIDR, hint)
	case b > c.Family().Bits():
		return fmt.Errorf("node block size /%d is longer than an %s address (%d bits) in cluster CIDR %s%s: %s",
			b, c.Family(), c.Family().Bits(), c.CIDR, otherFamilyHint(c.Family(), b), hint)
	case b < c.CIDR.Bits():
		return fmt.Errorf("node block size /%d is shorter than cluster CIDR %s, so a block would not fit in it: %s", b, c.CIDR, hint)
	case b > maxBlockBits(c.Family()):
		return fmt.Errorf("node block size /%d leaves no pod address (network, gateway and broadcast are reserved): %s", b, hint)
	case b > hi:
		return fmt.Errorf("node block size /%d carves more than 2^%d blocks out of cluster CIDR %s: %s", b, maxBlockIndexBits, c.CIDR, hint)
	case b < lo:
		return fmt.Errorf("node block size /%d has more than 64 host bits: IPv6 node blocks must be /%d or longer: %s", b, minIPv6BlockBits, hint)
	}
	return nil
}

// otherFamilyHint suggests a swap of the IPv4 and IPv6 block sizes when an
// IPv4 CIDR is given a block size only IPv6 allows.
func otherFamilyHint(f Family, blockBits int) string {
	if f == IPv4 && blockBits <= maxIPv6BlockBits {
		return fmt.Sprintf(" (/%d is an IPv6 block size: are the IPv4 and IPv6 block sizes swapped?)", blockBits)
	}
	return ""
}

func maxBlockBits(f Family) int {
	if f == IPv4 {
		return maxIPv4BlockBits
	}
	return maxIPv6BlockBits
}

// blockBitsRange returns the range of valid block sizes for the CIDR.
func (c ClusterCIDR) blockBitsRange() (lo, hi int) {
	lo, hi = c.CIDR.Bits(), maxBlockBits(c.Family())
	if c.Family() == IPv6 {
		lo = max(lo, minIPv6BlockBits)
	}
	return lo, min(hi, c.CIDR.Bits()+maxBlockIndexBits)
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// validateClusterCIDRs checks a cluster's CIDR plan: each CIDR valid, at least
// one, and at most one per family.
func validateClusterCIDRs(cidrs []ClusterCIDR) error {
	if len(cidrs) == 0 {
		return fmt.Errorf("no cluster CIDR configured")
	}
	seen := map[Family]ClusterCIDR{}
	for _, c := range cidrs {
		if err := c.Validate(); err != nil {
			return err
		}
		if prev, ok := seen[c.Family()]; ok {
			return fmt.Errorf("two %s cluster CIDRs (%s and %s): kovs gives each node one block per family, configure one",
				c.Family(), prev.CIDR, c.CIDR)
		}
		seen[c.Family()] = c
	}
	return nil
}
