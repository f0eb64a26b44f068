package agent

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// portmapEntry is the conflist's portmap plugin, as written for backend.
func portmapEntry(t *testing.T, backend string) map[string]any {
	t.Helper()
	dir := t.TempDir()
	if err := writeCNIConf(dir, "/run/kovs/cni.sock", backend); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CNIConfFile))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	for _, p := range conf.Plugins {
		if p["type"] == "portmap" {
			return p
		}
	}
	t.Fatalf("no portmap in the conflist:\n%s", b)
	return nil
}

// A named backend spares every pod's ADD and DEL portmap's probe for iptables; auto
// leaves the probe to portmap.
func TestConflistNamesTheHostPortBackend(t *testing.T) {
	for _, backend := range []string{HostPortBackendIPTables, HostPortBackendNFTables} {
		if got := portmapEntry(t, backend)["backend"]; got != backend {
			t.Errorf("--hostport-backend %s: portmap's backend = %v, want %s", backend, got, backend)
		}
	}
	if got, ok := portmapEntry(t, HostPortBackendAuto)["backend"]; ok {
		t.Errorf("--hostport-backend auto: portmap's backend = %v, want none (portmap probes)", got)
	}
}

func TestConfigRefusesAnUnknownHostPortBackend(t *testing.T) {
	c := Config{NodeName: "node1", OVSDB: "unix:/run/db.sock", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		CNISocket: "/run/kovs/cni.sock", HostPortBackend: "ipvs"}
	c.Defaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `--hostport-backend "ipvs": use auto, iptables or nftables`) {
		t.Errorf("Validate = %v, want an error naming --hostport-backend and its values", err)
	}
	c.HostPortBackend = ""
	c.Defaults()
	if err := c.Validate(); err != nil || c.HostPortBackend != HostPortBackendAuto {
		t.Errorf("no --hostport-backend: Validate = %v, backend %q, want nil and auto", err, c.HostPortBackend)
	}
}
