package ipam

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// HighWaterAnnotationKey is the Node annotation in which kovs-controller records, per
// pod block of the node, an address at or above the highest it has handed out. After a
// restart the controller rebuilds each block's pool from the live pods' records, which
// say nothing of addresses freed just before: with the high water restored
// (AddressPool.RestoreHighWater) those are reused only after every never-used address
// above it, and never within a quarantine, as they would have been without the restart.
// For example:
//
//	{"10.244.1.0/24":"10.244.1.48","fd00:10:244:1::/64":"fd00:10:244:1::30"}
const HighWaterAnnotationKey = "kovs.io/address-high-water"

// HighWater is the recorded high-water address of each of a node's blocks.
type HighWater map[netip.Prefix]netip.Addr

// ParseHighWater parses the kovs.io/address-high-water annotation; every address must lie
// inside its block.
func ParseHighWater(value string) (HighWater, error) {
	var raw map[string]string
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, &AnnotationError{Annotation: HighWaterAnnotationKey, Err: err}
	}
	hw := HighWater{}
	for k, v := range raw {
		block, err := netip.ParsePrefix(k)
		if err != nil || block != block.Masked() {
			return nil, &AnnotationError{Annotation: HighWaterAnnotationKey, Field: k, Err: fmt.Errorf("not a node block")}
		}
		ip, err := netip.ParseAddr(v)
		if err != nil {
			return nil, &AnnotationError{Annotation: HighWaterAnnotationKey, Field: k, Err: err}
		}
		if !block.Contains(ip) {
			return nil, &AnnotationError{Annotation: HighWaterAnnotationKey, Field: k, Err: fmt.Errorf("%s is outside the block", ip)}
		}
		hw[block] = ip
	}
	return hw, nil
}

// Annotation is the annotation's value (blocks in order, so equal records encode alike).
func (hw HighWater) Annotation() string {
	blocks := slices.SortedFunc(maps.Keys(hw), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	var b []byte
	b = append(b, '{')
	for i, block := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(block.String())
		v, _ := json.Marshal(hw[block].String())
		b = append(append(append(b, k...), ':'), v...)
	}
	return string(append(b, '}'))
}
