package ipam

import (
	"testing"
)

func TestClusterCIDRValidate(t *testing.T) {
	tests := []struct {
		name      string
		cidr      string
		blockBits int
		wantErr   []string // fragments; nil means valid
	}{
		{name: "default IPv4", cidr: "10.244.0.0/16", blockBits: 24},
		{name: "default IPv6", cidr: "fd00:10:244::/48", blockBits: 64},
		{name: "IPv4 block as large as the CIDR", cidr: "10.244.0.0/24", blockBits: 24},
		{name: "IPv4 smallest block", cidr: "10.244.0.0/16", blockBits: 30},
		{name: "IPv6 smallest block", cidr: "fd00::/112", blockBits: 126},
		{name: "IPv6 2^63 blocks", cidr: "::/1", blockBits: 64},
		{
			name: "IPv4 CIDR with an IPv6 block size", cidr: "10.244.0.0/16", blockBits: 64,
			wantErr: []string{"/64 is longer than an IPv4 address", "10.244.0.0/16", "/64 is an IPv6 block size", "between /16 and /30, e.g. /24"},
		},
		{
			name: "block shorter than the CIDR", cidr: "10.244.0.0/16", blockBits: 12,
			wantErr: []string{"/12 is shorter than cluster CIDR 10.244.0.0/16", "between /16 and /30"},
		},
		{
			name: "IPv4 /31 block leaves no pod address", cidr: "10.244.0.0/16", blockBits: 31,
			wantErr: []string{"/31 leaves no pod address", "between /16 and /30"},
		},
		{
			name: "IPv6 block with more than 64 host bits", cidr: "fd00:10:244::/48", blockBits: 56,
			wantErr: []string{"/56 has more than 64 host bits", "/64 or longer", "between /64 and /111"},
		},
		{
			name: "IPv6 /127 block", cidr: "fd00:10:244::/48", blockBits: 127,
			wantErr: []string{"/127 leaves no pod address"},
		},
		{
			name: "IPv6 block longer than 128", cidr: "fd00:10:244::/48", blockBits: 129,
			wantErr: []string{"/129 is longer than an IPv6 address (128 bits)"},
		},
		{
			name: "too many blocks", cidr: "fd00::/8", blockBits: 72,
			wantErr: []string{"carves more than 2^63 blocks", "between /64 and /71"},
		},
		{name: "block size not set", cidr: "10.244.0.0/16", wantErr: []string{"not set", "e.g. /24"}},
		{name: "host bits set", cidr: "10.244.1.0/16", blockBits: 24, wantErr: []string{"host bits set: use 10.244.0.0/16"}},
		{name: "IPv4-mapped", cidr: "::ffff:10.244.0.0/112", blockBits: 120, wantErr: []string{"IPv4-mapped"}},
		{name: "IPv4 CIDR too small", cidr: "10.244.0.0/31", blockBits: 31, wantErr: []string{"too small", "/30 or shorter"}},
		{name: "IPv6 CIDR too large", cidr: "::/0", blockBits: 64, wantErr: []string{"too large", "/1 or longer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ClusterCIDR{CIDR: prefix(tt.cidr), BlockBits: tt.blockBits}.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantErrContains(t, err, tt.wantErr...)
		})
	}
	if err := (ClusterCIDR{}).Validate(); err == nil {
		t.Error("zero ClusterCIDR validated")
	}
}

func TestClusterCIDRCapacity(t *testing.T) {
	tests := []struct {
		cidr      string
		blockBits int
		want      uint64
	}{
		{"10.244.0.0/16", 24, 256},
		{"10.244.0.0/16", 16, 1},
		{"10.0.0.0/8", 24, 65536},
		{"fd00:10:244::/48", 64, 65536},
		{"::/1", 64, 1 << 63},
	}
	for _, tt := range tests {
		c := ClusterCIDR{CIDR: prefix(tt.cidr), BlockBits: tt.blockBits}
		if got := c.Capacity(); got != tt.want {
			t.Errorf("%v.Capacity() = %d, want %d", c, got, tt.want)
		}
	}
}

func TestParseClusterCIDR(t *testing.T) {
	c, err := ParseClusterCIDR("fd00:10:244::/48", 0)
	if err != nil || c != DefaultClusterCIDR(IPv6) {
		t.Errorf("ParseClusterCIDR(fd00:10:244::/48, 0) = %v, %v; want the IPv6 default", c, err)
	}
	c, err = ParseClusterCIDR("10.244.0.0/16", 0)
	if err != nil || c != DefaultClusterCIDR(IPv4) {
		t.Errorf("ParseClusterCIDR(10.244.0.0/16, 0) = %v, %v; want the IPv4 default", c, err)
	}
	_, err = ParseClusterCIDR("10.244.0.0", 24)
	wantErrContains(t, err, `parse cluster CIDR "10.244.0.0"`)
	_, err = ParseClusterCIDR("10.244.0.0/16", 64)
	wantErrContains(t, err, "IPv6 block size")
}

func TestValidateClusterCIDRs(t *testing.T) {
	wantErrContains(t, validateClusterCIDRs(nil), "no cluster CIDR")
	wantErrContains(t, validateClusterCIDRs([]ClusterCIDR{
		DefaultClusterCIDR(IPv4), {CIDR: prefix("10.245.0.0/16"), BlockBits: 24},
	}), "two IPv4 cluster CIDRs (10.244.0.0/16 and 10.245.0.0/16)")
	if err := validateClusterCIDRs([]ClusterCIDR{DefaultClusterCIDR(IPv6), DefaultClusterCIDR(IPv4)}); err != nil {
		t.Errorf("dual-stack defaults: %v", err)
	}
}
