package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// addresses returns n single-address prefixes.
func addresses(n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range out {
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	return out
}

// fullMessages are a snapshot and a delta with every field of NodeShare and Delta set,
// address sets long and short (above and below minEncodedAddresses) and empty.
func fullMessages(t *testing.T) []Message {
	big, small := addresses(300), addresses(3)
	rule := policy.Rule{ID: "ns/p/ingress/0", Policy: policy.PolicyRef{Namespace: "ns", Name: "p"}, Direction: policy.Ingress,
		AppliedTo: "at", Peers: []string{"big", "small"}, Ports: []policy.Port{{Protocol: policy.TCP, Port: 80}}, Action: policy.ActionAllow}
	pod := policy.PodKey{Namespace: "ns", Name: "a", UID: "u1"}
	cluster := []policy.ClusterRule{{ID: "c/0", Action: policy.ClusterPass, Ports: []policy.Port{{Protocol: policy.UDP, Port: 53}}}}
	share := policy.NodeShare{Node: "n1", Generation: 7,
		AddressSets:   map[string]policy.AddressSet{"big": {ID: "big", Addresses: big}, "small": {ID: "small", Addresses: small}, "empty": {ID: "empty"}},
		AppliedToSets: map[string]policy.AppliedToSet{"at": {ID: "at", Pods: []policy.AppliedPod{{PodKey: pod}}}},
		Rules:         map[string]policy.Rule{rule.ID: rule},
		Isolation:     policy.Isolation{Ingress: []policy.PodKey{pod}, Egress: []policy.PodKey{pod}},
		Pods:          []policy.PodKey{pod}, ClusterRules: cluster, MeetPrevious: true}
	delta := policy.Delta{Node: "n1", FromGeneration: 7, Generation: 8,
		AddedAddressSets:     []policy.AddressSet{{ID: "big2", Addresses: big}, {ID: "small2", Addresses: small}, {ID: "empty2"}},
		UpdatedAddressSets:   []policy.AddressSetPatch{{ID: "big", Added: addresses(2), Removed: big[:1]}},
		RemovedAddressSets:   []string{"small"},
		AddedAppliedToSets:   []policy.AppliedToSet{{ID: "at2"}},
		UpdatedAppliedToSets: []policy.AppliedToSet{{ID: "at", Pods: []policy.AppliedPod{{PodKey: pod}}}},
		RemovedAppliedToSets: []string{"at3"},
		AddedRules:           []policy.Rule{rule}, UpdatedRules: []policy.Rule{rule}, RemovedRules: []string{"x"},
		Isolation: &policy.Isolation{Ingress: []policy.PodKey{pod}},
		AddedPods: []policy.PodKey{pod}, RemovedPods: []policy.PodKey{pod},
		ClusterRules: &cluster, Release: true}
	// A field added to the types later must be set here too, or this test would not
	// see whether the wire form carries it.
	for _, v := range []any{share, delta} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Fatalf("fullMessages: set %T.%s", v, rv.Type().Field(i).Name)
			}
		}
	}
	return []Message{
		{Type: MessageSnapshot, Generation: 7, Snapshot: &share},
		{Type: MessageDelta, Generation: 8, Delta: &delta},
		{Type: MessageKeepalive, Generation: 8},
	}
}

func TestWireFormIsThePolicyTypesJSON(t *testing.T) {
	sets := newSetEncodings()
	for _, m := range fullMessages(t) {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*setEncodings{nil, sets, sets} { // the second time from the encodings
			var buf bytes.Buffer
			if err := newMessageWriter(&buf, c).write(m); err != nil {
				t.Fatal(err)
			}
			var gotAny, wantAny any
			if err := json.Unmarshal(buf.Bytes(), &gotAny); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &wantAny); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotAny, wantAny) {
				t.Fatalf("%s: wire form\n%s\nthe policy types' JSON\n%s", m.Type, buf.Bytes(), want)
			}
			var back Message
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, m) {
				t.Fatalf("%s: decoded %+v, sent %+v", m.Type, back, m)
			}
		}
	}
	if len(sets.byList) != 1 {
		t.Fatalf("encodings hold %d lists, want 1 (the one long list, shared by a snapshot set and a delta set)", len(sets.byList))
	}
	// The Encoder's two forms give the stream's bytes.
	enc := NewEncoder()
	for _, m := range fullMessages(t) {
		var stream bytes.Buffer
		if err := newMessageWriter(&stream, sets).write(m); err != nil {
			t.Fatal(err)
		}
		appended, err := enc.Append([]byte("prefix"), m)
		if err != nil {
			t.Fatal(err)
		}
		var written bytes.Buffer
		if err := enc.Write(&written, m); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(appended, append([]byte("prefix"), stream.Bytes()...)) || !bytes.Equal(written.Bytes(), stream.Bytes()) {
			t.Fatalf("%s: Append gave\n%s\nWrite\n%s\nthe stream\n%s", m.Type, appended, written.Bytes(), stream.Bytes())
		}
	}
}

// writes records each slice written to it.
type writes [][]byte

func (w *writes) Write(b []byte) (int, error) {
	*w = append(*w, b)
	return len(b), nil
}

// TestStreamsWriteASharedListWithoutACopy: a stream writes a kept list's JSON from the
// encodings themselves, so n streams sent a set of n addresses make no n copies of it
// (BenchmarkEncodeSharedSet counts the bytes allocated). Written the same way twice, it is
// the same bytes both times.
func TestStreamsWriteASharedListWithoutACopy(t *testing.T) {
	sets := newSetEncodings()
	long := addresses(1000)
	m := Message{Type: MessageDelta, Generation: 2, Delta: &policy.Delta{Node: "n1", FromGeneration: 1, Generation: 2,
		AddedAddressSets: []policy.AddressSet{{ID: "wide", Addresses: long}}}}
	var first, second writes
	for _, w := range []*writes{&first, &second} {
		if err := newMessageWriter(w, sets).write(m); err != nil {
			t.Fatal(err)
		}
	}
	kept, _, _ := sets.encode(long)
	for i, w := range []writes{first, second} {
		found := false
		for _, b := range w {
			found = found || (len(b) == len(kept) && &b[0] == &kept[0])
		}
		if !found {
			t.Fatalf("stream %d: the list's JSON was not written from the encodings (%d writes)", i+1, len(w))
		}
	}
}

func TestSetEncodingsByIdentity(t *testing.T) {
	c := newSetEncodings()
	l := addresses(100)
	a, _, _ := c.encode(l)
	b, _, _ := c.encode(l)
	if &a[0] != &b[0] {
		t.Fatal("the same list was encoded twice")
	}
	// The same addresses in another list are another list: they are encoded on their own
	// (identity is all the encodings look at).
	other, _, _ := c.encode(slices.Clone(l))
	if &other[0] == &a[0] || !bytes.Equal(other, a) {
		t.Fatal("another list with the same addresses did not get its own, equal encoding")
	}
	// A shorter list from the same first element is another list.
	short, _, _ := c.encode(l[:minEncodedAddresses])
	want, _ := json.Marshal(l[:minEncodedAddresses])
	if !bytes.Equal(short, want) {
		t.Fatalf("a list's prefix encoded as %s, want %s", short, want)
	}
	if len(c.byList) != 3 {
		t.Fatalf("encodings hold %d lists, want 3", len(c.byList))
	}
}

func TestSetEncodingsBounded(t *testing.T) {
	c := newSetEncodings()
	for range 3 * maxEncodedBytes / (12 * 10_000) {
		if _, _, err := c.encode(addresses(10_000)); err != nil {
			t.Fatal(err)
		}
		if c.bytes > maxEncodedBytes {
			t.Fatalf("encodings estimate %d bytes, over the bound %d", c.bytes, maxEncodedBytes)
		}
	}
	if n := len(c.byList); n == 0 || n > maxEncodedBytes/(12*10_000) {
		t.Fatalf("encodings hold %d lists of 10,000 addresses", n)
	}
}

// BenchmarkEncodeSharedSet: the stream messages of a policy over every node: each of
// 2,000 nodes is sent a delta that adds the set of all 2,000 nodes' pods. Reported: the
// time to encode all of them with the lists' JSON shared (messageWriter) against each
// stream encoding its own with encoding/json (as the streams did before), run in the same
// process, alternating, and the ratio; and the bytes the shared way allocates (the
// encodings' one copy of the list, and no copy per stream).
func BenchmarkEncodeSharedSet(b *testing.B) {
	const nodes = 2000
	set := addresses(nodes)
	msgs := make([]Message, nodes)
	for i := range msgs {
		d := policy.Delta{Node: fmt.Sprint("node-", i), FromGeneration: 1, Generation: 2,
			AddedAddressSets: []policy.AddressSet{{ID: "all", Addresses: set}}}
		msgs[i] = Message{Type: MessageDelta, Generation: 2, Delta: &d}
	}
	encodeAll := func(write func(Message) error) time.Duration {
		start := time.Now()
		for _, m := range msgs {
			if err := write(m); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var own, shared time.Duration
	var allocated uint64
	var before, after runtime.MemStats
	for range b.N {
		own += encodeAll(func(m Message) error { return json.NewEncoder(io.Discard).Encode(m) })
		sets := newSetEncodings()
		runtime.ReadMemStats(&before)
		shared += encodeAll(func(m Message) error { return newMessageWriter(io.Discard, sets).write(m) })
		runtime.ReadMemStats(&after)
		allocated += after.TotalAlloc - before.TotalAlloc
	}
	b.ReportMetric(float64(own.Nanoseconds())/float64(b.N), "ns-own/op")
	b.ReportMetric(float64(shared.Nanoseconds())/float64(b.N), "ns-shared/op")
	b.ReportMetric(float64(allocated)/float64(b.N), "bytes-shared/op")
	b.ReportMetric(float64(shared)/float64(own), "shared/own")
}
