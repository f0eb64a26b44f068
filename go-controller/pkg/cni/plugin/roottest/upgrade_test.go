package roottest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/emulator"
)

// The conflists before and after kovs-cni ran portmap itself: portmap chained after
// kovs-cni for every pod, and kovs-cni alone taking the portMappings (what kovs-agent
// writes now, docs/configuration.md).
const (
	chainedPortmapConflist = `{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"kovs","plugins":[
	{"type":"kovs-cni","socket":%q},
	{"type":"portmap","capabilities":{"portMappings":true},"backend":"iptables"}]}`
	delegatedPortmapConflist = `{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"kovs","plugins":[
	{"type":"kovs-cni","socket":%q,"capabilities":{"portMappings":true},"portmap":{"backend":"iptables"}}]}`
)

// A pod's hostPort mapped while the conflist chained portmap is unmapped by a DEL under
// the conflist where kovs-cni runs portmap, and the other way round (a downgrade): the
// real kovs-cni and portmap binaries, run through libcni as containerd runs them, against
// the node namespace's iptables.
func TestHostPortsAcrossTheConflistChange(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("portmap needs iptables: %v", err)
	}
	bin := buildPlugins(t)
	for _, tc := range []struct {
		name     string
		add, del string
	}{
		{"upgrade", chainedPortmapConflist, delegatedPortmapConflist},
		{"downgrade", delegatedPortmapConflist, chainedPortmapConflist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := e.newPod(1, podConfig(1))
			att := emulator.Attachment{ContainerID: p.containerID, NetNSPath: p.netns, Namespace: p.ref.Namespace,
				Name: p.ref.Name, UID: p.ref.UID, PortMappings: []emulator.PortMapping{{HostPort: 18080, ContainerPort: 80, Protocol: "tcp"}}}
			confDir, cache := t.TempDir(), t.TempDir()
			ctx := context.Background()

			rt := e.runtimeWith(t, confDir, bin, cache, tc.add)
			if _, err := rt.Add(ctx, att); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if rules := e.natRules(t); !strings.Contains(rules, "--dport 18080") {
				t.Fatalf("no DNAT of hostPort 18080 after ADD:\n%s", rules)
			}
			rt = e.runtimeWith(t, confDir, bin, cache, tc.del)
			if err := rt.Del(ctx, att); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if rules := e.natRules(t); strings.Contains(rules, "18080") || strings.Contains(rules, "-N CNI-DN-") {
				t.Errorf("hostPort 18080 still mapped after DEL under the other conflist:\n%s", rules)
			}
			assertOnlyLoopback(t, e.node)
		})
	}
}

// buildPlugins builds kovs-cni and portmap (the version go.mod requires) into a directory.
func buildPlugins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"github.com/kovs-net/kovs/go-controller/cmd/kovs-cni",
		"github.com/containernetworking/plugins/plugins/meta/portmap"} {
		cmd := exec.Command("go", "build", "-o", dir+"/", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

// runtimeWith writes conflist (with the fake agent's socket) into confDir and returns a
// runtime of the node that has loaded it.
func (e *env) runtimeWith(t *testing.T, confDir, binDir, cacheDir, conflist string) *emulator.Runtime {
	t.Helper()
	if err := os.WriteFile(filepath.Join(confDir, "10-kovs.conflist"), fmt.Appendf(nil, conflist, e.socket), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := emulator.NewRuntime(confDir, binDir, cacheDir, e.node)
	if err := rt.Ready(context.Background()); err != nil {
		t.Fatalf("runtime not ready with %s: %v", conflist, err)
	}
	return rt
}

// natRules is the node namespace's iptables nat table.
func (e *env) natRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", filepath.Base(e.node), "iptables", "-w", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -t nat -S in %s: %v\n%s", e.node, err, out)
	}
	return string(out)
}
