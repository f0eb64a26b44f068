package stream

import (
	"encoding/json"
	"io"
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
	var l line
	if err := e.sets.appendMessage(&l, m); err != nil {
		return nil, err
	}
	return append(l.flatten(b), '\n'), nil
}

// Write writes m's line of the stream to w as a stream does (messageWriter): the shared
// lists' JSON is written from the encodings, not copied into the line.
func (e *Encoder) Write(w io.Writer, m Message) error {
	return newMessageWriter(w, e.sets).write(m)
}

// line is one message being encoded: its own bytes in buf, and the shared lists' JSON
// (setEncodings) spliced in without a copy: each of shared goes after buf[:at].
// A set every node of n holds is n addresses sent to n streams; copied into each
// stream's line it made n² bytes of garbage per change (26 % of the allocation of
// transition's BenchmarkFanOutPolicyGrowth), written from here it makes none.
type line struct {
	buf    []byte
	shared []splice
}

type splice struct {
	at   int
	json []byte
}

// splice puts shared bytes at the end of the line so far.
func (l *line) splice(json []byte) { l.shared = append(l.shared, splice{at: len(l.buf), json: json}) }

// flatten appends the whole line to b.
func (l *line) flatten(b []byte) []byte {
	from := 0
	for _, s := range l.shared {
		b = append(append(b, l.buf[from:s.at]...), s.json...)
		from = s.at
	}
	return append(b, l.buf[from:]...)
}

// writeTo writes the line to w, its own bytes and the shared ones in order.
func (l *line) writeTo(w io.Writer) error {
	from := 0
	for _, s := range l.shared {
		if _, err := w.Write(l.buf[from:s.at]); err != nil {
			return err
		}
		if _, err := w.Write(s.json); err != nil {
			return err
		}
		from = s.at
	}
	_, err := w.Write(l.buf[from:])
	return err
}

// encode returns the JSON of l (nil for an empty list, which the field then omits), and
// whether the encodings keep it (shared by every message that sends l: never to be
// changed).
func (c *setEncodings) encode(l []netip.Prefix) ([]byte, bool, error) {
	if len(l) == 0 {
		return nil, false, nil
	}
	if c == nil || len(l) < minEncodedAddresses {
		j, err := json.Marshal(l)
		return j, false, err
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
	return e.json, e.err == nil, e.err
}

// appendMessage appends m's JSON to l: the JSON of the policy types, with each address
// set's list taken from the encodings and spliced in as it is. (A list handed to
// encoding/json as a json.RawMessage is validated and compacted byte by byte on every
// message: with that, BenchmarkEncodeSharedSet measured 0.34 of the time of each stream
// encoding its own; copied, 0.04.) A message is written as its header's JSON
// with the share or delta appended, and the share's or delta's address sets appended to
// its own JSON without them: objects whose JSON always has members before (a share's node,
// generation and isolation; a delta's node and generations), so the splice needs no case
// for an empty object. TestWireFormIsThePolicyTypesJSON holds the result equal to
// json.Marshal's of the same message.
func (c *setEncodings) appendMessage(l *line, m Message) error {
	if m.Snapshot == nil && m.Delta == nil {
		return l.appendJSON(m)
	}
	if err := l.appendJSON(Message{Type: m.Type, Generation: m.Generation}); err != nil {
		return err
	}
	l.buf = l.buf[:len(l.buf)-1] // the header's closing brace
	if m.Snapshot != nil {
		rest := *m.Snapshot
		rest.AddressSets = nil
		l.buf = append(l.buf, `,"snapshot":`...)
		if err := l.appendJSON(rest); err != nil {
			return err
		}
		if len(m.Snapshot.AddressSets) > 0 {
			ids := slices.Sorted(maps.Keys(m.Snapshot.AddressSets))
			l.buf = append(l.buf[:len(l.buf)-1], `,"addressSets":{`...)
			for i, id := range ids {
				if i > 0 {
					l.buf = append(l.buf, ',')
				}
				if err := l.appendJSON(id); err != nil {
					return err
				}
				l.buf = append(l.buf, ':')
				if err := c.appendSet(l, m.Snapshot.AddressSets[id]); err != nil {
					return err
				}
			}
			l.buf = append(l.buf, "}}"...)
		}
	}
	if m.Delta != nil {
		rest := *m.Delta
		rest.AddedAddressSets = nil
		l.buf = append(l.buf, `,"delta":`...)
		if err := l.appendJSON(rest); err != nil {
			return err
		}
		if len(m.Delta.AddedAddressSets) > 0 {
			l.buf = append(l.buf[:len(l.buf)-1], `,"addedAddressSets":[`...)
			for i, s := range m.Delta.AddedAddressSets {
				if i > 0 {
					l.buf = append(l.buf, ',')
				}
				if err := c.appendSet(l, s); err != nil {
					return err
				}
			}
			l.buf = append(l.buf, "]}"...)
		}
	}
	l.buf = append(l.buf, '}')
	return nil
}

// appendSet appends an address set's JSON, its list from the encodings: spliced in when
// the encodings keep it, copied when it is one of its own.
func (c *setEncodings) appendSet(l *line, s policy.AddressSet) error {
	l.buf = append(l.buf, `{"id":`...)
	if err := l.appendJSON(s.ID); err != nil {
		return err
	}
	if len(s.Addresses) > 0 {
		addrs, kept, err := c.encode(s.Addresses)
		if err != nil {
			return err
		}
		l.buf = append(l.buf, `,"addresses":`...)
		if kept {
			l.splice(addrs)
		} else {
			l.buf = append(l.buf, addrs...)
		}
	}
	l.buf = append(l.buf, '}')
	return nil
}

func (l *line) appendJSON(v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.buf = append(l.buf, j...)
	return nil
}
