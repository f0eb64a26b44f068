package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// ErrExhausted matches, through errors.Is, every error that says a cluster CIDR
// or a node block has nothing left to hand out.
var ErrExhausted = errors.New("exhausted")

// ErrConflict matches, through errors.Is, every error that says a restored
// block or address cannot be recorded for its owner.
var ErrConflict = errors.New("conflict")

// SubnetExhaustedError says that every node block of a cluster CIDR is allocated.
type SubnetExhaustedError struct {
	// ClusterCIDR is the exhausted CIDR and its block size.
	ClusterCIDR ClusterCIDR
}

// Error names the cluster CIDR, the block size and the node cap.
func (e *SubnetExhaustedError) Error() string {
	c := e.ClusterCIDR
	return fmt.Sprintf("cluster CIDR %s has no free /%d node block: all %d blocks are allocated, which caps the cluster at %d nodes; "+
		"widen the cluster CIDR or use longer node blocks", c.CIDR, c.BlockBits, c.Capacity(), c.Capacity())
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *SubnetExhaustedError) Is(target error) bool { return target == ErrExhausted }

// AddressExhaustedError says that a node block has no pod address to hand out
// now: each usable address is either in use or freed and in quarantine.
type AddressExhaustedError struct {
	// Block is the exhausted node block.
	Block netip.Prefix
	// Usable is the number of addresses of the block a pod can get.
	Usable uint64
	// InUse is the number of addresses held by pods.
	InUse uint64
	// Quarantined is the number of freed addresses waiting out the quarantine.
	Quarantined uint64
	// ReadyAt is when the first quarantined address becomes free; zero if none is quarantined.
	ReadyAt time.Time
}

// Error names the block and says whether waiting helps.
func (e *AddressExhaustedError) Error() string {
	if e.Quarantined == 0 {
		return fmt.Sprintf("node block %s has no free pod address: all %d usable addresses are in use", e.Block, e.Usable)
	}
	return fmt.Sprintf("node block %s has no free pod address: %d of %d usable addresses are in use and %d are in quarantine, the first until %s",
		e.Block, e.InUse, e.Usable, e.Quarantined, e.ReadyAt.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *AddressExhaustedError) Is(target error) bool { return target == ErrExhausted }

// ConflictReason says why a restored block or address was refused.
type ConflictReason int

const (
	// ConflictTaken: another owner holds the block or address.
	ConflictTaken ConflictReason = iota + 1
	// ConflictAlreadyAssigned: the owner already holds another block or address
	// of the same family.
	ConflictAlreadyAssigned
	// ConflictOutside: the block or address lies outside the cluster CIDR or
	// node block it must come from (or no CIDR of its family is configured).
	ConflictOutside
	// ConflictWrongSize: the block's prefix length is not the configured block size.
	ConflictWrongSize
	// ConflictMisaligned: the block has host bits set, so it is not a block boundary.
	ConflictMisaligned
	// ConflictReserved: the address is the block's network, gateway or broadcast address.
	ConflictReserved
)

// String returns a short name of the reason.
func (r ConflictReason) String() string {
	switch r {
	case ConflictTaken:
		return "taken"
	case ConflictAlreadyAssigned:
		return "already-assigned"
	case ConflictOutside:
		return "outside"
	case ConflictWrongSize:
		return "wrong-size"
	case ConflictMisaligned:
		return "misaligned"
	case ConflictReserved:
		return "reserved"
	}
	return fmt.Sprintf("ConflictReason(%d)", int(r))
}

// ConflictError says why a block or address read back from the API cannot be
// recorded for the node or pod that claims it.
type ConflictError struct {
	// Kind is what was claimed: "node block" or "pod address".
	Kind string
	// Owner is the node name or pod key that claimed it.
	Owner string
	// Claim is the claimed block or address.
	Claim string
	// Reason classifies the conflict.
	Reason ConflictReason
	// Holder is, for ConflictTaken, the node or pod holding the claim and, for
	// ConflictAlreadyAssigned, the block or address the owner already holds.
	Holder string
	// Detail says what is wrong, in words.
	Detail string
}

// Error names the claim, its owner and what is wrong.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s claimed by %q: %s", e.Kind, e.Claim, e.Owner, e.Detail)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// AnnotationError says which field of an annotation value is bad.
type AnnotationError struct {
	// Annotation is the annotation key, e.g. kovs.io/pod-network.
	Annotation string
	// Field is the JSON path of the bad field, e.g. "ips[1].gateway"; empty
	// when the value is not JSON of the expected shape.
	Field string
	// Err is what is wrong with it.
	Err error
}

// Error names the annotation and the field.
func (e *AnnotationError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("invalid %s annotation: %v", e.Annotation, e.Err)
	}
	return fmt.Sprintf("invalid %s annotation: field %q: %v", e.Annotation, e.Field, e.Err)
}

// Unwrap returns the underlying error.
func (e *AnnotationError) Unwrap() error { return e.Err }
