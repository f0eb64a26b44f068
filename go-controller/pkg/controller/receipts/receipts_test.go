package receipts

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func policy(name, rv string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-1", Name: name, ResourceVersion: rv}}
}

// clock returns a Ring of size whose receipts are taken at 1 s, 2 s, ... after t0.
func clocked(size int) (*Ring, time.Time) {
	r := NewRing(size)
	t0 := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	tick := 0
	r.now = func() time.Time { tick++; return t0.Add(time.Duration(tick) * time.Second) }
	return r, t0
}

// TestHandlerRecordsEachVersionOnce: an addition, an update to a new version, a resync
// (same version: not a new receipt), a deletion and a tombstone, each with the time the
// handler ran and the version's resourceVersion.
func TestHandlerRecordsEachVersionOnce(t *testing.T) {
	r, t0 := clocked(10)
	h := r.Handler("NetworkPolicy")
	h.OnAdd(policy("np-1", "10"), false)
	h.OnUpdate(policy("np-1", "10"), policy("np-1", "11"))
	h.OnUpdate(policy("np-1", "11"), policy("np-1", "11"))
	h.OnDelete(policy("np-1", "12"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns-1/np-2", Obj: nil})
	want := []Receipt{
		{Kind: "NetworkPolicy", Namespace: "ns-1", Name: "np-1", ResourceVersion: "10", At: t0.Add(1 * time.Second)},
		{Kind: "NetworkPolicy", Namespace: "ns-1", Name: "np-1", ResourceVersion: "11", At: t0.Add(2 * time.Second)},
		{Kind: "NetworkPolicy", Namespace: "ns-1", Name: "np-1", ResourceVersion: "12", Deleted: true, At: t0.Add(3 * time.Second)},
		{Kind: "NetworkPolicy", Namespace: "ns-1", Name: "np-2", Deleted: true, At: t0.Add(4 * time.Second)},
	}
	got := r.Dump()
	if len(got.Receipts) != len(want) || len(got.Overwritten) != 0 {
		t.Fatalf("receipts = %+v, want %+v", got, want)
	}
	for i := range want {
		if got.Receipts[i] != want[i] {
			t.Errorf("receipt %d = %+v, want %+v", i, got.Receipts[i], want[i])
		}
	}
}

// TestRingKeepsTheLastOnes: past its size the ring drops the oldest, says how many, and
// serves the rest oldest first as JSON.
func TestRingKeepsTheLastOnes(t *testing.T) {
	r, _ := clocked(3)
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		r.Record("NetworkPolicy", policy(name, string(rune('1'+i))), false)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	var d Dump
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range d.Receipts {
		names = append(names, x.Name)
	}
	if len(names) != 3 || names[0] != "c" || names[1] != "d" || names[2] != "e" || d.Overwritten["NetworkPolicy"] != 2 {
		t.Errorf("served %v, %v overwritten; want [c d e], 2", names, d.Overwritten)
	}
	if d.Receipts[2].ResourceVersion != "5" || d.Receipts[2].At.IsZero() {
		t.Errorf("last receipt %+v: want resourceVersion 5 and its time", d.Receipts[2])
	}
}

// TestEachKindKeepsItsOwnLastOnes: a flood of one kind's versions (Pods under churn) does
// not push another kind's (NetworkPolicies) out of the ring; the dump interleaves both
// by time.
func TestEachKindKeepsItsOwnLastOnes(t *testing.T) {
	r, _ := clocked(2)
	r.Record("NetworkPolicy", policy("np-1", "1"), false)
	for i := range 10 {
		r.Record("Pod", &metav1.ObjectMeta{Namespace: "ns-1", Name: "pod", ResourceVersion: string(rune('a' + i))}, false)
	}
	r.Record("NetworkPolicy", policy("np-2", "2"), false)
	d := r.Dump()
	var got []string
	for _, x := range d.Receipts {
		got = append(got, x.Kind+"/"+x.Name+"@"+x.ResourceVersion)
	}
	want := []string{"NetworkPolicy/np-1@1", "Pod/pod@i", "Pod/pod@j", "NetworkPolicy/np-2@2"}
	if !slices.Equal(got, want) {
		t.Errorf("dump %v, want %v", got, want)
	}
	if d.Overwritten["Pod"] != 8 || d.Overwritten["NetworkPolicy"] != 0 {
		t.Errorf("overwritten %v, want 8 Pods and no NetworkPolicy", d.Overwritten)
	}
}
