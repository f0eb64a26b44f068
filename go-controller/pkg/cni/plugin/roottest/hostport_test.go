package roottest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
)

// These tests stand a recording portmap in CNI_PATH and check how kovs-cni runs it: the
// real portmap mapping a hostPort is tested end to end in test/e2e/edges (emulated nodes)
// and test/e2e/realnode (kubelet and containerd).

// fakePortmap records each run's command, stdin and CNI_ environment in its directory; it
// fails (CNI error 120, not kovs-cni's own default 999) while the file "fail" exists there.
const fakePortmap = `#!/bin/sh
d=$(dirname "$0")
cat > "$d/stdin.$CNI_COMMAND"
env | grep '^CNI_' | sort > "$d/env.$CNI_COMMAND"
echo "$CNI_COMMAND" >> "$d/calls"
if [ -e "$d/fail" ]; then
	echo '{"cniVersion":"1.1.0","code":120,"msg":"fake portmap: iptables said no"}'
	exit 1
fi
if [ "$CNI_COMMAND" = ADD ]; then echo '{"cniVersion":"1.1.0"}'; fi
`

// portmapDir is a CNI_PATH directory holding the recording portmap.
func portmapDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "portmap"), []byte(fakePortmap), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// portmapCalls are the commands the recording portmap in dir ran, in order.
func portmapCalls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "calls"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

const hostPortMappings = `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":8081,"containerPort":81,"protocol":"udp","hostIP":"10.0.0.2"}]`

// withHostPorts gives args the runtime's portMappings, portmap options and a CNI_PATH.
func withHostPorts(args *skel.CmdArgs, cniPath, mappings, portmapOptions string) *skel.CmdArgs {
	conf := strings.TrimSuffix(string(args.StdinData), "}")
	if mappings != "" {
		conf += `,"runtimeConfig":{"portMappings":` + mappings + `}`
	}
	if portmapOptions != "" {
		conf += `,"portmap":` + portmapOptions
	}
	args.StdinData = []byte(conf + "}")
	args.Path = cniPath
	return args
}

// A pod without a hostPort runs no portmap, on ADD, CHECK or DEL.
func TestNoHostPortRunsNoPortmap(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	dir := portmapDir(t)

	prev, err := e.run(add, withHostPorts(e.args(p, nil), dir, "", `{"backend":"iptables"}`))
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if _, err := e.run(check, withHostPorts(e.args(p, prev), dir, "", "")); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if _, err := e.run(del, withHostPorts(e.args(p, prev), dir, "[]", "")); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if calls := portmapCalls(t, dir); len(calls) != 0 {
		t.Errorf("portmap ran for a pod without hostPorts: %v", calls)
	}
}

// A pod's hostPorts go to portmap as a delegated plugin: the network's name and version,
// the options, the mappings as the runtime gave them and the pod's result, with the
// runtime's CNI arguments; on ADD after the agent attached the pod, and on CHECK and DEL.
func TestHostPortsRunPortmap(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	dir := portmapDir(t)

	addArgs := withHostPorts(e.args(p, nil), dir, hostPortMappings, `{"backend":"iptables","snat":false}`)
	prev, err := e.run(add, addArgs)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	conf := portmapStdin(t, dir, "ADD")
	want := map[string]any{"cniVersion": "1.1.0", "name": "kovs", "type": "portmap", "backend": "iptables", "snat": false,
		"runtimeConfig": map[string]any{"portMappings": decode(t, hostPortMappings)}, "prevResult": decode(t, string(prev))}
	if !reflect.DeepEqual(conf, want) {
		t.Errorf("portmap ADD config:\n got %v\nwant %v", conf, want)
	}
	assertPortmapEnv(t, dir, "ADD", addArgs)
	if a := e.agent.Calls(cnitest.OpAdd); len(a) != 1 {
		t.Errorf("attach calls = %d, want 1", len(a))
	}

	if _, err := e.run(check, withHostPorts(e.args(p, prev), dir, hostPortMappings, "")); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if got := portmapStdin(t, dir, "CHECK")["prevResult"]; !reflect.DeepEqual(got, decode(t, string(prev))) {
		t.Errorf("portmap CHECK prevResult = %v, want the ADD result", got)
	}
	delArgs := withHostPorts(e.args(p, prev), dir, hostPortMappings, `{"backend":"iptables"}`)
	if _, err := e.run(del, delArgs); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := portmapStdin(t, dir, "DEL")["runtimeConfig"]; !reflect.DeepEqual(got, want["runtimeConfig"]) {
		t.Errorf("portmap DEL runtimeConfig = %v, want %v", got, want["runtimeConfig"])
	}
	assertPortmapEnv(t, dir, "DEL", delArgs)
	if calls := portmapCalls(t, dir); !reflect.DeepEqual(calls, []string{"ADD", "CHECK", "DEL"}) {
		t.Errorf("portmap commands = %v, want ADD, CHECK, DEL", calls)
	}
	assertOnlyLoopback(t, e.node)
}

// A failing portmap fails the ADD with portmap's words, and undoes everything: portmap's
// own DEL, the agent's port and the veth; nothing is printed.
func TestPortmapFailureUndoesEverything(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(2, podConfig(2))
	dir := portmapDir(t)
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := e.run(add, withHostPorts(e.args(p, nil), dir, hostPortMappings, ""))

	var te *types.Error
	if !errors.As(err, &te) || te.Code != 120 ||
		!strings.Contains(te.Msg, "map the hostPorts of pod default/web-2: portmap ADD of the pod's 2 hostPort mappings: fake portmap: iptables said no") {
		t.Errorf("ADD = %v, want portmap's code 120 and message", err)
	}
	if len(out) != 0 {
		t.Errorf("a failed ADD printed %s", out)
	}
	if calls := portmapCalls(t, dir); !reflect.DeepEqual(calls, []string{"ADD", "DEL"}) {
		t.Errorf("portmap commands = %v, want ADD then its undoing DEL", calls)
	}
	if d := e.agent.Calls(cnitest.OpDetach); len(d) != 1 || d[0].Detach.ContainerID != p.containerID {
		t.Errorf("detach calls after a failed portmap = %+v, want one for the sandbox", d)
	}
	assertOnlyLoopback(t, e.node)
	assertOnlyLoopback(t, p.netns)
}

// Without portmap in CNI_PATH, a pod with hostPorts is refused with what to fix, and
// nothing is left; its DEL still succeeds, so the pod is not stuck Terminating.
func TestHostPortsWithoutPortmap(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(3, podConfig(3))
	empty := t.TempDir()

	_, err := e.run(add, withHostPorts(e.args(p, nil), empty, hostPortMappings, ""))

	if err == nil || !strings.Contains(err.Error(), "the pod has hostPorts, which kovs-cni maps with the portmap plugin: no portmap plugin in CNI_PATH") ||
		!strings.Contains(err.Error(), "kovs-agent's init container installs portmap next to kovs-cni") {
		t.Errorf("ADD = %v, want an error saying portmap is missing from CNI_PATH and who installs it", err)
	}
	if err != nil && strings.Contains(err.Error(), "undoing failed") {
		t.Errorf("ADD = %v: portmap never ran, so no undo of it can have failed", err)
	}
	assertOnlyLoopback(t, e.node)
	assertOnlyLoopback(t, p.netns)
	if _, err := e.run(del, withHostPorts(e.args(p, nil), empty, hostPortMappings, "")); err != nil {
		t.Errorf("DEL without portmap = %v, want success", err)
	}
}

// portmapStdin is the network config the recording portmap got for command.
func portmapStdin(t *testing.T, dir, command string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "stdin."+command))
	if err != nil {
		t.Fatalf("portmap never ran %s: %v", command, err)
	}
	m, ok := decode(t, string(b)).(map[string]any)
	if !ok {
		t.Fatalf("portmap %s config is not an object: %s", command, b)
	}
	return m
}

// assertPortmapEnv checks portmap ran command with the runtime's CNI arguments.
func assertPortmapEnv(t *testing.T, dir, command string, args *skel.CmdArgs) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "env."+command))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + args.ContainerID, "CNI_NETNS=" + args.Netns,
		"CNI_IFNAME=" + args.IfName, "CNI_ARGS=" + args.Args, "CNI_PATH=" + args.Path} {
		if !strings.Contains("\n"+string(b), "\n"+kv+"\n") {
			t.Errorf("portmap %s environment lacks %s:\n%s", command, kv, b)
		}
	}
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}
