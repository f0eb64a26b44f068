package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNodeSubnetsAnnotation(t *testing.T) {
	tests := []struct {
		name   string
		blocks []string
		want   string
	}{
		{"dual-stack", []string{"fd00:10:244:1::/64", "10.244.1.0/24"}, `{"ipv4":["10.244.1.0/24"],"ipv6":["fd00:10:244:1::/64"]}`},
		{"IPv4 only", []string{"10.244.1.0/24"}, `{"ipv4":["10.244.1.0/24"]}`},
		{"IPv6 only", []string{"fd00:10:244:1::/64"}, `{"ipv6":["fd00:10:244:1::/64"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var blocks []netip.Prefix
			for _, b := range tt.blocks {
				blocks = append(blocks, prefix(b))
			}
			a, err := NewNodeSubnetsAnnotation(blocks)
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Annotation()
			if err != nil || got != tt.want {
				t.Fatalf("Annotation = %s, %v; want %s", got, err, tt.want)
			}
			back, err := ParseNodeSubnetsAnnotation(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Blocks()) != len(blocks) || back.Blocks()[0].Addr().Is4() != (len(back.IPv4) > 0) {
				t.Errorf("Blocks() = %v", back.Blocks())
			}
		})
	}
}

func TestParseNodeSubnetsAnnotationErrors(t *testing.T) {
	tests := []struct {
		name      string
		value     string
		wantField string
		wantMsg   string
	}{
		{"not JSON", `[`, "", "invalid kovs.io/node-subnets annotation"},
		{"a list, not an object", `["10.244.1.0/24"]`, "", "cannot unmarshal"},
		{"empty", `{}`, "", "no block"},
		{"bad prefix", `{"ipv4":["10.244.1.0/33"]}`, "ipv4[0]", "10.244.1.0/33"},
		{"wrong family", `{"ipv4":["fd00::/64"]}`, "ipv4[0]", "not an IPv4 prefix"},
		{"wrong family IPv6", `{"ipv4":["10.244.1.0/24"],"ipv6":["10.244.2.0/24"]}`, "ipv6[0]", "not an IPv6 prefix"},
		{"host bits", `{"ipv4":["10.244.1.7/24"]}`, "ipv4[0]", "the block is 10.244.1.0/24"},
		{"two blocks", `{"ipv4":["10.244.1.0/24","10.244.2.0/24"]}`, "ipv4", "one block per family"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNodeSubnetsAnnotation(tt.value)
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("Parse = %v, want an *AnnotationError", err)
			}
			if ae.Field != tt.wantField {
				t.Errorf("field = %q, want %q (%v)", ae.Field, tt.wantField, err)
			}
			wantErrContains(t, err, tt.wantMsg)
		})
	}
}
