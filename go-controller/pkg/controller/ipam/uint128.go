package ipam

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// uint128 is an address as a 128-bit number, for block and offset arithmetic.
// IPv4 addresses use the low 32 bits.
type uint128 struct{ hi, lo uint64 }

func addrToUint128(a netip.Addr) uint128 {
	if a.Is4() {
		b := a.As4()
		return uint128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return uint128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// addr converts u back to an address of family f.
func (u uint128) addr(f Family) netip.Addr {
	if f == IPv4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u uint128) add(n uint64) uint128 {
	lo, carry := bits.Add64(u.lo, n, 0)
	return uint128{hi: u.hi + carry, lo: lo}
}

// sub returns u - v, which the callers know to fit in 64 bits.
func (u uint128) sub(v uint128) uint64 {
	lo, _ := bits.Sub64(u.lo, v.lo, 0)
	return lo
}

// shl returns n << s as a 128-bit number, for s in [0, 128).
func shl(n uint64, s uint) uint128 {
	switch {
	case s == 0:
		return uint128{lo: n}
	case s >= 64:
		return uint128{hi: n << (s - 64)}
	}
	return uint128{hi: n >> (64 - s), lo: n << s}
}

// shr returns the low 64 bits of u >> s, for s in [0, 128).
func (u uint128) shr(s uint) uint64 {
	switch {
	case s == 0:
		return u.lo
	case s >= 64:
		return u.hi >> (s - 64)
	}
	return u.lo>>s | u.hi<<(64-s)
}

func (u uint128) or(v uint128) uint128 { return uint128{hi: u.hi | v.hi, lo: u.lo | v.lo} }
