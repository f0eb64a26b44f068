// Package podaddr is kovs-agent's pod address allocator: it hands out each pod's
// addresses (one per family) from its own node's blocks, with the rules of package ipam
// (freed addresses to the back of the line, and not within the quarantine).
//
// # Where allocations are kept
//
// An allocation is durable when the pod's OVS port is: the port's external_ids carry the
// pod's UID and addresses, written in the one OVSDB transaction that creates the port,
// and the Open_vSwitch database outlives the agent, ovs-vswitchd, ovsdb-server (its
// file) and a node reboot. No second store can disagree with br-int. What the ports
// cannot say after a restart is which addresses above the highest live one were freed
// just before it; the Book records, durably and ahead of use (HighWaterStore), a high
// water per block, so that those come back only after every never-used address and not
// within the quarantine.
//
// The order that makes a crash at any point safe: Allocate (memory, and the high water
// durable before an address above it is handed out), then the port (durable), and only
// then the answer to kovs-cni, which is when the pod's interface gets the address. A
// crash before the port leaves an address no pod uses (it is below the recorded high
// water, so it comes back after the quarantine); a crash after it leaves the port,
// which the next start restores, and a retried ADD of the same pod (its UID) gets the
// same addresses back.
package podaddr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
)

// highWaterAhead is how far ahead of use the Book records a block's high water: one
// database write per this many never-used addresses handed out. A restart treats at
// most that many never-used addresses as freed.
const highWaterAhead = 16

// HighWaterStore keeps the recorded high water of the node's blocks.
type HighWaterStore interface {
	// RecordHighWater durably replaces the record; it returns once the record would
	// survive a crash of the agent.
	RecordHighWater(ctx context.Context, hw ipam.HighWater) error
}

// Record is one allocation as the store (a pod port) holds it.
type Record struct {
	// Port names the record for messages (the OVS port).
	Port string
	// Pod is namespace/name, for messages.
	Pod string
	UID string
	IPs []netip.Addr
}

// Book allocates the pod addresses of one node. It is safe for concurrent use.
type Book struct {
	node  string
	flag  string
	pools *ipam.PodAddressPools
	store HighWaterStore

	mu       sync.Mutex
	recorded ipam.HighWater
	// recordMu serializes high-water writes: a lower record never lands over a higher,
	// and an Allocate whose address a write in flight covers waits for it.
	recordMu sync.Mutex
}

// New returns the Book of node's blocks. flag names what an operator changes when a
// block is full (for the exhaustion message).
func New(node string, blocks []netip.Prefix, opts ipam.PoolOptions, store HighWaterStore, flag string) (*Book, error) {
	pools, err := ipam.NewPodAddressPools(blocks, opts)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	return &Book{node: node, flag: flag, pools: pools, store: store, recorded: ipam.HighWater{}}, nil
}

// CorruptError says the store holds something the Book will not guess about: a record
// it cannot read, an address outside the node's blocks (another node's store, or blocks
// that changed), or one address recorded for two pods.
type CorruptError struct {
	Record string
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("pod address store: %s: %v", e.Record, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Restore loads what the store holds, before any Allocate: every record's addresses and
// the recorded high water (a block's record is ignored when the block is no longer the
// node's: its next record replaces it). Records of one UID (a pod's replaced sandboxes)
// must agree.
// Anything it cannot take as it is fails the whole restore with a *CorruptError naming
// the record; nothing is guessed.
func (b *Book) Restore(records []Record, hw ipam.HighWater) error {
	var errs []error
	for _, r := range records {
		if r.UID == "" {
			errs = append(errs, &CorruptError{Record: r.name(), Err: errors.New("it names no pod UID")})
			continue
		}
		if len(r.IPs) == 0 {
			errs = append(errs, &CorruptError{Record: r.name(), Err: errors.New("it holds no address")})
			continue
		}
		if held := b.pools.Lookup(r.UID); len(held) > 0 {
			if !sameIPs(held, r.IPs) {
				errs = append(errs, &CorruptError{Record: r.name(),
					Err: fmt.Errorf("pod UID %s holds %v in another record, this one says %v", r.UID, addrsOf(held), r.IPs)})
			}
			continue
		}
		if err := b.pools.Restore(r.UID, r.IPs); err != nil {
			errs = append(errs, &CorruptError{Record: r.name(), Err: err})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	kept := ipam.HighWater{}
	for _, pool := range b.pools.Pools() {
		mark, ok := hw[pool.Block()]
		if !ok {
			continue
		}
		if err := pool.RestoreHighWater(mark); err != nil {
			return &CorruptError{Record: "recorded high water", Err: err}
		}
		kept[pool.Block()] = mark
	}
	b.mu.Lock()
	b.recorded = kept
	b.mu.Unlock()
	return nil
}

func (r Record) name() string {
	if r.Pod == "" {
		return "port " + r.Port
	}
	return fmt.Sprintf("port %s (pod %s)", r.Port, r.Pod)
}

// Allocate returns the addresses of the pod of uid, IPv4 first, handing out new ones if
// it holds none. A high water that covers them is durable before it returns. A full
// block returns an error that wraps ipam.ErrExhausted and names the node, the block and
// what to change.
func (b *Book) Allocate(ctx context.Context, uid string) ([]ipam.PodAddress, error) {
	if uid == "" {
		return nil, errors.New("allocate pod addresses: no pod UID")
	}
	addrs, err := b.pools.Allocate(uid)
	if err != nil {
		if errors.Is(err, ipam.ErrExhausted) {
			return nil, fmt.Errorf("node %s: %w: give nodes larger blocks (%s) or fewer pods per node", b.node, err, b.flag)
		}
		return nil, err
	}
	if err := b.recordHighWater(ctx); err != nil {
		b.pools.Release(uid)
		return nil, err
	}
	return addrs, nil
}

// Lookup returns the addresses the pod of uid holds.
func (b *Book) Lookup(uid string) []ipam.PodAddress { return b.pools.Lookup(uid) }

// Release frees the addresses of the pod of uid (to the back of the line) and returns
// them.
func (b *Book) Release(uid string) []netip.Addr { return b.pools.Release(uid) }

// Blocks returns the node's blocks, IPv4 first.
func (b *Book) Blocks() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range b.pools.Pools() {
		out = append(out, p.Block())
	}
	return out
}

// Pools returns the per-family pools (for usage metrics).
func (b *Book) Pools() []*ipam.AddressPool { return b.pools.Pools() }

// recordHighWater writes the high water when the addresses handed out passed the record.
func (b *Book) recordHighWater(ctx context.Context) error {
	if _, stale := b.highWaterToRecord(); !stale {
		return nil
	}
	b.recordMu.Lock()
	defer b.recordMu.Unlock()
	hw, stale := b.highWaterToRecord()
	if !stale {
		return nil // a write that covers this address landed meanwhile
	}
	if err := b.store.RecordHighWater(ctx, hw); err != nil {
		return fmt.Errorf("record the pod address high water of node %s: %w", b.node, err)
	}
	b.mu.Lock()
	b.recorded = hw
	b.mu.Unlock()
	return nil
}

// highWaterToRecord returns the record to write when some block handed out an address
// above what is recorded.
func (b *Book) highWaterToRecord() (ipam.HighWater, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := ipam.HighWater{}
	stale := false
	for _, pool := range b.pools.Pools() {
		hw, handed := pool.HighWater()
		mark, has := b.recorded[pool.Block()]
		switch {
		case has && (!handed || hw.Compare(mark) <= 0):
			next[pool.Block()] = mark
		case !handed:
		default:
			next[pool.Block()] = pool.HighWaterAhead(highWaterAhead)
			stale = true
		}
	}
	return next, stale
}

func sameIPs(held []ipam.PodAddress, ips []netip.Addr) bool {
	a := addrsOf(held)
	b := slices.Clone(ips)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}

func addrsOf(addrs []ipam.PodAddress) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Address.Addr())
	}
	return out
}

// String describes the node's blocks, for logs.
func (b *Book) String() string {
	var parts []string
	for _, p := range b.pools.Pools() {
		parts = append(parts, fmt.Sprintf("%s (%d/%d in use)", p.Block(), p.InUse(), p.Usable()))
	}
	return strings.Join(parts, ", ")
}

// Import records an allocation the store does not hold but the cluster shows in use (a
// running pod's status.podIPs on this node, read on the first start after an upgrade or
// after br-int was lost), after Restore. A pod that already holds addresses, or an
// address another pod holds, is refused with the reason; the caller logs it.
func (b *Book) Import(r Record) error {
	if held := b.pools.Lookup(r.UID); len(held) > 0 {
		if sameIPs(held, r.IPs) {
			return nil
		}
		return fmt.Errorf("%s: pod UID %s already holds %v", r.name(), r.UID, addrsOf(held))
	}
	// Addresses that could be recorded are kept even when another is refused: the pod
	// runs with them.
	if err := b.pools.Restore(r.UID, r.IPs); err != nil {
		return fmt.Errorf("%s: %w", r.name(), err)
	}
	return nil
}
