package stream

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// setEncodings holds the JSON of the large address lists the streams send, by the
// list's identity, so that a set every node holds is encoded once, not once per node. A
// policy over every node of 5,000 sends each agent a set of 5,000 addresses: encoded per
// stream, that is 25 million prefixes marshalled one by one per change (json.Marshal was
// 43 % of the allocations of transition's BenchmarkFanOutPolicyGrowth); encoded once,
// each stream copies the bytes (BenchmarkEncodeSharedSet says how much that saves).
//
// Identity stands for content for the reason policy.SetMemo gives: no list of a share is
// ever changed in place, so the same first element and length are the same addresses.
// An entry keeps its list alive, so its address cannot be reused for another list while
// the entry exists. Entries are dropped all at once when their bytes pass maxEncodedBytes
// (the lists of older changes are garbage by then). Safe for concurrent use; a nil
// *setEncodings encodes every list afresh.
type setEncodings struct {
	mu     sync.Mutex
	byList map[listKey]*encodedList
	bytes  int
}

// minEncodedAddresses is the least addresses a list has for its encoding to be kept:
// shorter lists cost little to encode again.
const minEncodedAddresses = 64

// maxEncodedBytes bounds the bytes the encodings keep.
const maxEncodedBytes = 32 << 20

type listKey struct {
	first *netip.Prefix
	n     int
}

// encodedList is one list's JSON, made once by whichever stream asks first while the
// others wait for it.
type encodedList struct {
	once sync.Once
	json []byte
	err  error
}

func newSetEncodings() *setEncodings {
	return &setEncodings{byList: map[listKey]*encodedList{}}
}

// Encoder encodes messages as the server does, sharing the address lists' JSON across
// every message it encodes (for benchmarks that stand in for the streams). Safe for
// concurrent use.
type Encoder struct{ sets *setEncodings }

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder { return &Encoder{sets: newSetEncodings()} }

// Append appends m's line of the stream to b.
func (e *Encoder) Append(b []byte, m Message) ([]byte, error) {
	b, err := e.sets.appendMessage(b, m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// encode returns the JSON of l (nil for an empty list, which the field then omits).
func (c *setEncodings) encode(l []netip.Prefix) ([]byte, error) {
	if len(l) == 0 {
		return nil, nil
	}
	if c == nil || len(l) < minEncodedAddresses {
		return json.Marshal(l)
	}
	k := listKey{&l[0], len(l)}
	c.mu.Lock()
	e, ok := c.byList[k]
	if !ok {
		// Each address is at least 11 bytes of JSON ("1.2.3.4/32",); the estimate only
		// decides when to drop everything.
		if c.bytes += 12 * len(l); c.bytes > maxEncodedBytes {
			clear(c.byList)
			c.bytes = 12 * len(l)
		}
		e = &encodedList{}
		c.byList[k] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.json, e.err = json.Marshal(l) })
	return e.json, e.err
}

// appendMessage appends m's JSON to b: the JSON of the policy types, with each address
// set's list taken from the encodings and copied in as it is. (A list handed to
// encoding/json as a json.RawMessage is validated and compacted byte by byte on every
// message: with that, BenchmarkEncodeSharedSet measured 0.34 of the time of each stream
// encoding its own; copied, 0.04.) A message is written as its header's JSON
// with the share or delta appended, and the share's or delta's address sets appended to
// its own JSON without them: objects whose JSON always has members before (a share's node,
// generation and isolation; a delta's node and generations), so the splice needs no case
// for an empty object. TestWireFormIsThePolicyTypesJSON holds the result equal to
// json.Marshal's of the same message.
func (c *setEncodings) appendMessage(b []byte, m Message) ([]byte, error) {
	if m.Snapshot == nil && m.Delta == nil {
		return appendJSON(b, m)
	}
	b, err := appendJSON(b, Message{Type: m.Type, Generation: m.Generation})
	if err != nil {
		return nil, err
	}
	b = b[:len(b)-1] // the header's closing brace
	if m.Snapshot != nil {
		rest := *m.Snapshot
		rest.AddressSets = nil
		if b, err = appendJSON(append(b, `,"snapshot":`...), rest); err != nil {
			return nil, err
		}
		if len(m.Snapshot.AddressSets) > 0 {
			ids := slices.Sorted(maps.Keys(m.Snapshot.AddressSets))
			b = append(b[:len(b)-1], `,"addressSets":{`...)
			for i, id := range ids {
				if i > 0 {
					b = append(b, ',')
				}
				if b, err = appendJSON(b, id); err != nil {
					return nil, err
				}
				if b, err = c.appendSet(append(b, ':'), m.Snapshot.AddressSets[id]); err != nil {
					return nil, err
				}
			}
			b = append(b, "}}"...)
		}
	}
	if m.Delta != nil {
		rest := *m.Delta
		rest.AddedAddressSets = nil
		if b, err = appendJSON(append(b, `,"delta":`...), rest); err != nil {
			return nil, err
		}
		if len(m.Delta.AddedAddressSets) > 0 {
			b = append(b[:len(b)-1], `,"addedAddressSets":[`...)
			for i, s := range m.Delta.AddedAddressSets {
				if i > 0 {
					b = append(b, ',')
				}
				if b, err = c.appendSet(b, s); err != nil {
					return nil, err
				}
			}
			b = append(b, "]}"...)
		}
	}
	return append(b, '}'), nil
}

// appendSet appends an address set's JSON, its list from the encodings.
func (c *setEncodings) appendSet(b []byte, s policy.AddressSet) ([]byte, error) {
	b, err := appendJSON(append(b, `{"id":`...), s.ID)
	if err != nil {
		return nil, err
	}
	if len(s.Addresses) > 0 {
		addrs, err := c.encode(s.Addresses)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"addresses":`...), addrs...)
	}
	return append(b, '}'), nil
}

func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}
