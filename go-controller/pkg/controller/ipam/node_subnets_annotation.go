package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
)

// NodeSubnetsAnnotationKey is the Node annotation holding its NodeSubnetsAnnotation.
const NodeSubnetsAnnotationKey = "kovs.io/node-subnets"

// NodeSubnetsAnnotation is the value of a Node's kovs.io/node-subnets
// annotation: the node's blocks by family, for example
//
//	{"ipv4":["10.244.1.0/24"],"ipv6":["fd00:10:244:1::/64"]}
//
// The format keeps a list per family so that it can grow to several blocks per
// node; today a node has at most one per family, and Validate says so.
type NodeSubnetsAnnotation struct {
	IPv4 []netip.Prefix
	IPv6 []netip.Prefix
}

// NewNodeSubnetsAnnotation sorts a node's blocks by family.
func NewNodeSubnetsAnnotation(blocks []netip.Prefix) (NodeSubnetsAnnotation, error) {
	var a NodeSubnetsAnnotation
	for _, b := range blocks {
		if FamilyOf(b.Addr()) == IPv4 {
			a.IPv4 = append(a.IPv4, b)
		} else {
			a.IPv6 = append(a.IPv6, b)
		}
	}
	if err := a.Validate(); err != nil {
		return NodeSubnetsAnnotation{}, err
	}
	return a, nil
}

// Blocks returns the node's blocks, IPv4 first.
func (a NodeSubnetsAnnotation) Blocks() []netip.Prefix {
	return slices.Concat(a.IPv4, a.IPv6)
}

// Validate checks the annotation; the *AnnotationError it returns names the bad field.
func (a NodeSubnetsAnnotation) Validate() error {
	bad := func(field string, format string, args ...any) error {
		return &AnnotationError{Annotation: NodeSubnetsAnnotationKey, Field: field, Err: fmt.Errorf(format, args...)}
	}
	if len(a.IPv4)+len(a.IPv6) == 0 {
		return bad("", "no block")
	}
	for _, fam := range []struct {
		name   string
		family Family
		blocks []netip.Prefix
	}{{"ipv4", IPv4, a.IPv4}, {"ipv6", IPv6, a.IPv6}} {
		if len(fam.blocks) > 1 {
			return bad(fam.name, "%d blocks: a node has one block per family", len(fam.blocks))
		}
		for i, b := range fam.blocks {
			field := fmt.Sprintf("%s[%d]", fam.name, i)
			switch {
			case !b.IsValid():
				return bad(field, "not set")
			case b.Addr().Is4In6() || FamilyOf(b.Addr()) != fam.family:
				return bad(field, "%s is not an %s prefix", b, fam.family)
			case b != b.Masked():
				return bad(field, "%s has host bits set: the block is %s", b, b.Masked())
			}
		}
	}
	return nil
}

// nodeSubnetsJSON is the annotation's JSON form, with string fields so that
// parse errors can name the field.
type nodeSubnetsJSON struct {
	IPv4 []string `json:"ipv4,omitempty"`
	IPv6 []string `json:"ipv6,omitempty"`
}

// MarshalJSON encodes the annotation form.
func (a NodeSubnetsAnnotation) MarshalJSON() ([]byte, error) {
	var w nodeSubnetsJSON
	for _, b := range a.IPv4 {
		w.IPv4 = append(w.IPv4, b.String())
	}
	for _, b := range a.IPv6 {
		w.IPv6 = append(w.IPv6, b.String())
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes and validates the annotation form; errors are
// *AnnotationError naming the bad field. Unknown fields are ignored.
func (a *NodeSubnetsAnnotation) UnmarshalJSON(b []byte) error {
	var w nodeSubnetsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return &AnnotationError{Annotation: NodeSubnetsAnnotationKey, Err: err}
	}
	var v NodeSubnetsAnnotation
	for _, fam := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{{"ipv4", w.IPv4, &v.IPv4}, {"ipv6", w.IPv6, &v.IPv6}} {
		for i, s := range fam.in {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return &AnnotationError{Annotation: NodeSubnetsAnnotationKey, Field: fmt.Sprintf("%s[%d]", fam.name, i), Err: err}
			}
			*fam.out = append(*fam.out, p)
		}
	}
	if err := v.Validate(); err != nil {
		return err
	}
	*a = v
	return nil
}

// Annotation returns the value of the kovs.io/node-subnets annotation.
func (a NodeSubnetsAnnotation) Annotation() (string, error) {
	if err := a.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", NodeSubnetsAnnotationKey, err)
	}
	return string(b), nil
}

// ParseNodeSubnetsAnnotation parses the value of the kovs.io/node-subnets annotation.
func ParseNodeSubnetsAnnotation(value string) (NodeSubnetsAnnotation, error) {
	var a NodeSubnetsAnnotation
	if err := a.UnmarshalJSON([]byte(value)); err != nil {
		return NodeSubnetsAnnotation{}, err
	}
	return a, nil
}
