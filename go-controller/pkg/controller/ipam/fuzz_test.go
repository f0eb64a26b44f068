package ipam

import (
	"reflect"
	"testing"
)

// The annotations are outside input: a Pod's and a Node's, written through the API (the
// admission policy in dist/ keeps others from writing them, but the agent and the
// controller must survive whatever is there). Each parser either refuses a value or
// returns a record that encodes back to a value it parses to the same record.

func FuzzParsePodNetwork(f *testing.F) {
	f.Add(`{"ipv4":{"ip":"10.244.1.5/24","gateway":"10.244.1.1"},"mac":"0a:58:0a:f4:01:05"}`)
	f.Add(`{"ipv6":{"ip":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}}`)
	f.Add(`{}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, value string) {
		n, err := ParsePodNetwork(value)
		if err != nil {
			return
		}
		enc, err := n.Annotation()
		if err != nil {
			return // parsed but not valid to write: Validate refuses it
		}
		again, err := ParsePodNetwork(enc)
		if err != nil {
			t.Fatalf("%q parsed, encoded to %q, which does not parse: %v", value, enc, err)
		}
		if !reflect.DeepEqual(n, again) {
			t.Fatalf("%q: %+v encoded to %q parses to %+v", value, n, enc, again)
		}
	})
}

func FuzzParseNodeSubnetsAnnotation(f *testing.F) {
	f.Add(`{"ipv4":"10.244.1.0/24"}`)
	f.Add(`{"ipv4":["10.244.1.0/24","10.244.9.0/24"],"ipv6":"fd00:10:244:1::/64"}`)
	f.Add(`{"default":"10.244.1.0/24"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, value string) {
		a, err := ParseNodeSubnetsAnnotation(value)
		if err != nil {
			return
		}
		enc, err := a.Annotation()
		if err != nil {
			return
		}
		again, err := ParseNodeSubnetsAnnotation(enc)
		if err != nil {
			t.Fatalf("%q parsed, encoded to %q, which does not parse: %v", value, enc, err)
		}
		if !reflect.DeepEqual(a.Blocks(), again.Blocks()) {
			t.Fatalf("%q: blocks %v encoded to %q parse to %v", value, a.Blocks(), enc, again.Blocks())
		}
	})
}

func FuzzParseHighWater(f *testing.F) {
	f.Add(`{"10.244.1.0/24":"10.244.1.9"}`)
	f.Add(`{"fd00:10:244:1::/64":"fd00:10:244:1::ff","10.244.1.0/24":"10.244.1.9"}`)
	f.Add(`{"10.244.1.0/24":"10.244.2.9"}`)
	f.Fuzz(func(t *testing.T, value string) {
		hw, err := ParseHighWater(value)
		if err != nil {
			return
		}
		enc := hw.Annotation()
		again, err := ParseHighWater(enc)
		if err != nil {
			t.Fatalf("%q parsed, encoded to %q, which does not parse: %v", value, enc, err)
		}
		if !reflect.DeepEqual(hw, again) {
			t.Fatalf("%q: %v encoded to %q parses to %v", value, hw, enc, again)
		}
	})
}
