package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
	"github.com/kovs-net/kovs/go-controller/pkg/policy/stream"
)

// policyKey names a NetworkPolicy (its rules carry it as policy.PolicyRef).
type policyKey struct{ Namespace, Name string }

// presenceObserver is told when a policy's rules appear in or vanish from a node's share.
type presenceObserver interface {
	// generation is the share's after the snapshot or delta that made the change.
	observe(node string, p policyKey, present bool, at time.Time, generation uint64)
}

// Agent is one simulated kovs-agent: a policy.Sink that applies its node's share in
// memory and realizes every version at once (there is no switch to program), fed by a
// real stream client with its own connection and node-bound token.
type Agent struct {
	node     string
	observer presenceObserver

	mu       sync.Mutex
	share    policy.NodeShare
	have     bool
	policies map[policyKey]int // rules of each policy in the share
	changed  chan struct{}
	// addrLog, while it is not nil, is when each address first entered and first left
	// the share's address sets (the fan-out phase's address probes read it).
	addrLog map[netip.Addr]addrTimes

	snapshots, deltas, deltaBytes, wireBytes atomic.Int64
	snapshotAt                               atomic.Int64 // unix ns of the first snapshot
	lastSnapshotAt                           atomic.Int64 // unix ns of the latest snapshot
	lastApplied                              atomic.Int64 // unix ns of the last snapshot or delta
}

var (
	_ policy.Sink             = (*Agent)(nil)
	_ stream.RealizedNotifier = (*Agent)(nil)
)

func newAgent(node string, obs presenceObserver) *Agent {
	return &Agent{node: node, observer: obs, policies: map[policyKey]int{}, changed: make(chan struct{}, 1)}
}

// Snapshot replaces the share, as the agent's NodePolicy does.
func (a *Agent) Snapshot(share policy.NodeShare) error {
	if share.Node != a.node {
		return fmt.Errorf("policy snapshot for node %s received by node %s", share.Node, a.node)
	}
	if err := share.Validate(); err != nil {
		return fmt.Errorf("snapshot of node %s: %w", a.node, err)
	}
	now := time.Now()
	a.mu.Lock()
	if a.addrLog != nil {
		a.logAddresses(addressesOf(a.share.AddressSets), addressesOf(share.AddressSets), now)
	}
	old := a.policies
	a.share, a.have, a.policies = share, true, map[policyKey]int{}
	for _, r := range share.Rules {
		a.policies[policyKey{r.Policy.Namespace, r.Policy.Name}]++
	}
	flips := presenceFlips(old, a.policies)
	gen := a.share.Generation
	a.mu.Unlock()
	a.snapshots.Add(1)
	a.snapshotAt.CompareAndSwap(0, now.UnixNano())
	a.lastSnapshotAt.Store(now.UnixNano())
	a.lastApplied.Store(time.Now().UnixNano())
	a.notify(flips, now, gen)
	return nil
}

// Delta applies a change; an error makes the client reconnect for a fresh snapshot.
func (a *Agent) Delta(d policy.Delta) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	counts := map[policyKey]int{}
	touch := func(k policyKey) {
		if _, ok := counts[k]; !ok {
			counts[k] = a.policies[k]
		}
	}
	var mentioned, before map[netip.Addr]bool
	if a.addrLog != nil {
		mentioned = deltaAddresses(a.share, d)
		before = presence(a.share, mentioned)
	}
	for _, id := range d.RemovedRules {
		if r, ok := a.share.Rules[id]; ok {
			k := policyKey{r.Policy.Namespace, r.Policy.Name}
			touch(k)
			a.policies[k]--
		}
	}
	if err := d.Apply(&a.share); err != nil {
		a.mu.Unlock()
		return err
	}
	if a.addrLog != nil {
		a.logAddresses(before, presence(a.share, mentioned), now)
	}
	for _, r := range d.AddedRules {
		k := policyKey{r.Policy.Namespace, r.Policy.Name}
		touch(k)
		a.policies[k]++
	}
	after := map[policyKey]int{}
	for k := range counts {
		after[k] = a.policies[k]
		if a.policies[k] == 0 {
			delete(a.policies, k)
		}
	}
	gen := a.share.Generation
	a.mu.Unlock()
	a.deltas.Add(1)
	a.deltaBytes.Add(int64(len(b)))
	a.lastApplied.Store(time.Now().UnixNano())
	a.notify(presenceFlips(counts, after), now, gen)
	return nil
}

// addrTimes is when an address first entered and first left a share's address sets.
type addrTimes struct{ Added, Removed time.Time }

// startAddressLog begins (anew) the log of addresses entering and leaving the share.
func (a *Agent) startAddressLog() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrLog = map[netip.Addr]addrTimes{}
}

// stopAddressLog ends the log.
func (a *Agent) stopAddressLog() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrLog = nil
}

// addressTimes is what the log says of ip.
func (a *Agent) addressTimes(ip netip.Addr) addrTimes {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addrLog[ip]
}

// logAddresses notes the addresses whose presence differs between before and after (an
// address missing from a map is absent). a.mu is held.
func (a *Agent) logAddresses(before, after map[netip.Addr]bool, at time.Time) {
	for ip, in := range after {
		if t := a.addrLog[ip]; in && !before[ip] && t.Added.IsZero() {
			t.Added = at
			a.addrLog[ip] = t
		}
	}
	for ip, in := range before {
		if t := a.addrLog[ip]; in && !after[ip] && t.Removed.IsZero() {
			t.Removed = at
			a.addrLog[ip] = t
		}
	}
}

// addressesOf is the single addresses of sets, present.
func addressesOf(sets map[string]policy.AddressSet) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range sets {
		addSingle(out, s.Addresses)
	}
	return out
}

// deltaAddresses are the single addresses d adds to or removes from share's sets.
func deltaAddresses(share policy.NodeShare, d policy.Delta) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range d.AddedAddressSets {
		addSingle(out, s.Addresses)
	}
	for _, u := range d.UpdatedAddressSets {
		addSingle(out, u.Added)
		addSingle(out, u.Removed)
	}
	for _, id := range d.RemovedAddressSets {
		addSingle(out, share.AddressSets[id].Addresses)
	}
	return out
}

// addSingle marks the single-address prefixes of ps in out.
func addSingle(out map[netip.Addr]bool, ps []netip.Prefix) {
	for _, p := range ps {
		if p.IsSingleIP() {
			out[p.Addr()] = true
		}
	}
}

// presence says which of addrs some address set of share holds.
func presence(share policy.NodeShare, addrs map[netip.Addr]bool) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(addrs))
	for ip := range addrs {
		for _, s := range share.AddressSets {
			if s.Contains(ip) {
				out[ip] = true
				break
			}
		}
	}
	return out
}

// presenceFlip is a policy whose rules appeared (Present) or vanished.
type presenceFlip struct {
	Policy  policyKey
	Present bool
}

// presenceFlips compares rule counts per policy.
func presenceFlips(before, after map[policyKey]int) []presenceFlip {
	var out []presenceFlip
	for k, n := range after {
		if n > 0 && before[k] == 0 {
			out = append(out, presenceFlip{k, true})
		}
	}
	for k, n := range before {
		if n > 0 && after[k] == 0 {
			out = append(out, presenceFlip{k, false})
		}
	}
	return out
}

func (a *Agent) notify(flips []presenceFlip, at time.Time, generation uint64) {
	for _, f := range flips {
		a.observer.observe(a.node, f.Policy, f.Present, at, generation)
	}
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// Realized is the generation of the share: the simulated node enforces what it holds.
func (a *Agent) Realized() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.share.Generation
}

// RealizedChanged lets the stream client report at once, as the agent's NodePolicy does.
func (a *Agent) RealizedChanged() <-chan struct{} { return a.changed }

// hasPolicy reports whether the share holds rules of p.
func (a *Agent) hasPolicy(p policyKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.policies[p] > 0
}

// Share returns a copy of the share and whether a snapshot arrived.
func (a *Agent) Share() (policy.NodeShare, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.share.Clone(), a.have
}

// traffic is what the agent received in deltas so far.
func (a *Agent) traffic() Traffic { return Traffic{a.deltas.Load(), a.deltaBytes.Load()} }

// run follows the node's stream until ctx ends.
func (a *Agent) run(ctx context.Context, address, token string, roots stream.ClientConfig) error {
	cfg := roots
	cfg.Node, cfg.Address = a.node, address
	cfg.Token = func() (string, error) { return token, nil }
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, read: &a.wireBytes}, nil
	}
	client, err := stream.NewClient(cfg)
	if err != nil {
		return err
	}
	return client.Run(ctx, a)
}

// countingConn counts the bytes read from the controller: TLS records, HTTP/2 frames,
// keepalives and report answers included.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}
