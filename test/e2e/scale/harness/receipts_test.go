package harness

import (
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/receipts"
)

// TestSplitAtReceipts: each realized change is split at kovs-controller's receipt of its
// kind (creation or deletion) for its policy, the first at or after its write began; a
// change without one is counted, not timed.
func TestSplitAtReceipts(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b, c := policyKey{"ns-1", "churn-1"}, policyKey{"ns-2", "churn-2"}, policyKey{"ns-3", "churn-3"}
	changes := []finishedChange{
		{policy: a, create: true, start: at(0), realized: at(900)},
		{policy: a, create: false, start: at(2000), realized: at(2300)},
		{policy: b, create: true, start: at(100), realized: at(400)},
		{policy: c, create: true, start: at(100), realized: at(500)},
	}
	rec := func(p policyKey, deleted bool, ms int) receipts.Receipt {
		return receipts.Receipt{Kind: "NetworkPolicy", Namespace: p.Namespace, Name: p.Name, Deleted: deleted, At: at(ms)}
	}
	dump := receipts.Dump{Overwritten: map[string]uint64{"NetworkPolicy": 3}, Receipts: []receipts.Receipt{
		rec(a, false, 700), // a's creation received 700 ms after its write began: kovs 200 ms
		rec(b, true, 50),   // a deletion of b before its creation's write: not its receipt
		rec(b, false, 250), // b's creation: kovs 150 ms
		rec(a, true, 2100), // a's deletion: kovs 200 ms
		{Kind: "Pod", Namespace: "ns-3", Name: "churn-3", At: at(200)}, // another kind
	}}
	k := splitAtReceipts(changes, dump)
	if got, want := k.Kovs, (Durations{200 * time.Millisecond, 200 * time.Millisecond, 150 * time.Millisecond}); !slices.Equal(got, want) {
		t.Errorf("kovs's times = %v, want %v", got, want)
	}
	if got, want := k.ToReceipt, (Durations{700 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}); !slices.Equal(got, want) {
		t.Errorf("times to the receipt = %v, want %v", got, want)
	}
	if k.NoReceipt != 1 || k.Overwritten != 3 || k.ReceivedAfterRealized != 0 {
		t.Errorf("no receipt %d, overwritten %d, after realized %d; want 1 (churn-3), 3, 0", k.NoReceipt, k.Overwritten, k.ReceivedAfterRealized)
	}
	// No change carries the nodes that applied it: nothing split at the writes.
	if len(k.Controller) != 0 || k.NoWrite != 0 {
		t.Errorf("split at writes without nodes: %+v", k)
	}
	late := splitAtReceipts(changes[2:3], receipts.Dump{Receipts: []receipts.Receipt{rec(b, false, 450)}})
	if late.ReceivedAfterRealized != 1 || len(late.Kovs) != 0 {
		t.Errorf("a receipt after the realization was timed: %+v", late)
	}
}

// TestSplitAtWrites: kovs's time splits at the last write of the generations that applied
// the change (kovs-controller's part) and the slowest agent's write to apply; a change
// with a write not in the ring is counted, not split.
func TestSplitAtWrites(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p, q := policyKey{"ns", "wide"}, policyKey{"ns", "other"}
	changes := []finishedChange{
		{policy: p, create: true, start: at(0), realized: at(900), applied: []nodeApplied{
			{"n1", 7, at(300)}, // written at 250: agent 50 ms
			{"n2", 4, at(900)}, // written at 400: agent 500 ms, and the last write
		}},
		{policy: q, create: true, start: at(0), realized: at(600), applied: []nodeApplied{
			{"n1", 8, at(600)}, // generation 8 of n1 not in the ring
		}},
	}
	write := func(node string, gen string, ms int) receipts.Receipt {
		return receipts.Receipt{Kind: receipts.SentKind, Name: node, ResourceVersion: gen, At: at(ms)}
	}
	dump := receipts.Dump{Overwritten: map[string]uint64{receipts.SentKind: 9}, Receipts: []receipts.Receipt{
		{Kind: "NetworkPolicy", Namespace: "ns", Name: "wide", At: at(100)},
		{Kind: "NetworkPolicy", Namespace: "ns", Name: "other", At: at(100)},
		write("n1", "7", 250), write("n2", "4", 400), write("n2", "5", 450), write("n1", "6", 200),
	}}
	k := splitAtReceipts(changes, dump)
	if got, want := k.Controller, (Durations{300 * time.Millisecond}); !slices.Equal(got, want) {
		t.Errorf("controller parts = %v, want %v (the receipt at 100 ms to n2's write at 400 ms)", got, want)
	}
	if got, want := k.Agents, (Durations{500 * time.Millisecond}); !slices.Equal(got, want) {
		t.Errorf("agents' parts = %v, want %v (n2: written at 400 ms, applied at 900 ms)", got, want)
	}
	if k.NoWrite != 1 || k.WritesOverwritten != 9 || len(k.Kovs) != 2 {
		t.Errorf("no write %d, overwritten %d, timed %d; want 1, 9, 2", k.NoWrite, k.WritesOverwritten, len(k.Kovs))
	}
}
