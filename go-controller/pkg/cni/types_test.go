package cni

import (
	"strings"
	"testing"
)

func TestPodNetworkConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*PodNetworkConfig)
		wantErr string // "" means valid
	}{
		{name: "dual-stack", edit: func(*PodNetworkConfig) {}},
		{name: "IPv6 only", edit: func(c *PodNetworkConfig) { c.IPs = c.IPs[1:] }},
		{name: "no address", edit: func(c *PodNetworkConfig) { c.IPs = nil }, wantErr: "no pod address"},
		{name: "two IPv4", edit: func(c *PodNetworkConfig) { c.IPs[1] = IPConfig{Address: "10.244.1.6/24"} }, wantErr: "same family"},
		{name: "not a CIDR", edit: func(c *PodNetworkConfig) { c.IPs[0].Address = "10.244.1.5" }, wantErr: "10.244.1.5"},
		{name: "gateway of other family", edit: func(c *PodNetworkConfig) { c.IPs[0].Gateway = "fd00::1" }, wantErr: "other IP family"},
		{name: "bad MAC", edit: func(c *PodNetworkConfig) { c.MAC = "0a:58" }, wantErr: "pod MAC"},
		{name: "multicast MAC", edit: func(c *PodNetworkConfig) { c.MAC = "01:00:5e:00:00:01" }, wantErr: "unicast"},
		{name: "MTU too small", edit: func(c *PodNetworkConfig) { c.MTU = 576 }, wantErr: "MTU 576"},
		{name: "bad route", edit: func(c *PodNetworkConfig) { c.Routes = []RouteConfig{{Dst: "10.96.0.0"}} }, wantErr: "route destination"},
		{name: "route via other family", edit: func(c *PodNetworkConfig) { c.Routes = []RouteConfig{{Dst: "10.96.0.0/12", GW: "fd00::1"}} }, wantErr: "other IP family"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.edit(cfg)
			err := cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestIPConfigParseKeepsTheHostAddress(t *testing.T) {
	addr, gw, err := IPConfig{Address: "10.244.1.5/24", Gateway: "10.244.1.1"}.Parse()
	if err != nil {
		t.Fatal(err)
	}
	if addr.String() != "10.244.1.5/24" || gw.String() != "10.244.1.1" || len(addr.IP) != 4 {
		t.Errorf("Parse = %v (%d bytes), %v", addr, len(addr.IP), gw)
	}
}

func TestAttachRequestValidate(t *testing.T) {
	if err := testAttach().Validate(); err != nil {
		t.Errorf("valid request: %v", err)
	}
	noUID := testAttach()
	noUID.Pod.UID = ""
	if err := noUID.Validate(); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("request without pod UID: %v", err)
	}
}

func TestHostInterfaceName(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"4f1c2a9b7e3d0c5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c", "kv4f1c2a9b7e3d"},
		{"4f1c2a9b7e3d", "kv4f1c2a9b7e3d"},
	} {
		if got := HostInterfaceName(tc.id); got != tc.want {
			t.Errorf("HostInterfaceName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	// IDs that are not hex (or are short) are hashed: still kv + 12 hex digits, and
	// distinct for distinct IDs.
	seen := map[string]string{}
	for _, id := range []string{"pod-a", "pod-b", "POD-A", "4F1C2A9B7E3D0C5A", "abc", ""} {
		name := HostInterfaceName(id)
		if len(name) != 14 || len(name) > 15 || !strings.HasPrefix(name, "kv") || !isLowerHex(name[2:]) {
			t.Errorf("HostInterfaceName(%q) = %q, want kv and 12 hex digits", id, name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q both map to %q", id, other, name)
		}
		seen[name] = id
	}
}
