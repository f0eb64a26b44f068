package agent

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conflistPlugins are the plugins of the conflist, as written for backend.
func conflistPlugins(t *testing.T, backend string) ([]map[string]any, []byte) {
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
	return conf.Plugins, b
}

// kovs-cni is the only plugin: it takes the pods' portMappings and runs portmap for the
// pods that have any, so the runtime execs no portmap for a pod without a hostPort.
func TestConflistHasKovsCNIAloneTakingPortMappings(t *testing.T) {
	plugins, b := conflistPlugins(t, HostPortBackendIPTables)
	if len(plugins) != 1 || plugins[0]["type"] != "kovs-cni" {
		t.Fatalf("plugins of the conflist, want kovs-cni alone:\n%s", b)
	}
	if caps, _ := plugins[0]["capabilities"].(map[string]any); caps["portMappings"] != true {
		t.Errorf("kovs-cni's capabilities = %v, want portMappings (the runtime passes hostPorts only to a plugin declaring it):\n%s",
			plugins[0]["capabilities"], b)
	}
}

// A named backend spares every hostPort pod's ADD and DEL portmap's probe for iptables;
// auto leaves the probe to portmap.
func TestConflistNamesTheHostPortBackend(t *testing.T) {
	for _, backend := range []string{HostPortBackendIPTables, HostPortBackendNFTables} {
		plugins, b := conflistPlugins(t, backend)
		opts, _ := plugins[0]["portmap"].(map[string]any)
		if got := opts["backend"]; got != backend {
			t.Errorf("--hostport-backend %s: portmap's backend = %v, want %s:\n%s", backend, got, backend, b)
		}
	}
	plugins, b := conflistPlugins(t, HostPortBackendAuto)
	if got, ok := plugins[0]["portmap"]; ok {
		t.Errorf("--hostport-backend auto: portmap options = %v, want none (portmap probes):\n%s", got, b)
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
