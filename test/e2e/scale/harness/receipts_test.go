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
	late := splitAtReceipts(changes[2:3], receipts.Dump{Receipts: []receipts.Receipt{rec(b, false, 450)}})
	if late.ReceivedAfterRealized != 1 || len(late.Kovs) != 0 {
		t.Errorf("a receipt after the realization was timed: %+v", late)
	}
}
