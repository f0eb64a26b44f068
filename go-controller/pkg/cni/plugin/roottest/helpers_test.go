package roottest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/plugin"
)

// requireRoot skips the test unless it can create network namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veths (run `go test` as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2) to create network namespaces")
	}
}

// newNetNS creates a network namespace kovs-cnit-<random> and deletes it when the test
// ends, whatever happens. It returns the namespace's path.
func newNetNS(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "kovs-cnit-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { deleteNetNS(t, name) })
	return filepath.Join("/var/run/netns", name)
}

// deleteNetNS deletes a namespace made by newNetNS; a missing one is fine.
func deleteNetNS(t *testing.T, name string) {
	out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		t.Errorf("ip netns del %s: %v: %s", name, err, out)
	}
}

// env is one node: its namespace (the plugin runs there, as a runtime runs it) and a fake
// agent on a temporary socket.
type env struct {
	t      *testing.T
	node   string
	agent  *cnitest.Agent
	socket string
}

func newEnv(t *testing.T) *env {
	requireRoot(t)
	agent := cnitest.NewAgent()
	return &env{t: t, node: newNetNS(t), agent: agent, socket: agent.Serve(t)}
}

// pod is one pod of a test: its identity, sandbox and network namespace.
type pod struct {
	ref         cni.PodRef
	containerID string
	netns       string
}

// newPod creates the pod's namespace and gives it the i-th addresses of the node's block.
func (e *env) newPod(i int, cfg *cni.PodNetworkConfig) *pod {
	p := &pod{
		ref:         cni.PodRef{Namespace: "default", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("uid-%d", i)},
		containerID: fmt.Sprintf("%02x%s", i, strings.Repeat("c0ffee", 10)),
		netns:       newNetNS(e.t),
	}
	if cfg != nil {
		e.agent.SetPodNetwork(p.ref, cfg)
	}
	return p
}

// podConfig is a dual-stack config for the i-th pod (i < 200).
func podConfig(i int) *cni.PodNetworkConfig {
	return &cni.PodNetworkConfig{
		IPs: []cni.IPConfig{
			{Address: fmt.Sprintf("10.244.1.%d/24", 10+i), Gateway: "10.244.1.1"},
			{Address: fmt.Sprintf("fd00:10:244:1::%x/64", 0x10+i), Gateway: "fd00:10:244:1::1"},
		},
		MAC:                      fmt.Sprintf("0a:58:0a:f4:01:%02x", 10+i),
		Routes:                   []cni.RouteConfig{{Dst: "10.96.0.0/12"}},
		MTU:                      1450,
		DisableTxChecksumOffload: true,
	}
}

// args are the CNI arguments for p, with prevResult in the config when not nil.
func (e *env) args(p *pod, prevResult []byte) *skel.CmdArgs {
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni","socket":%q`, e.socket)
	if prevResult != nil {
		conf += `,"prevResult":` + string(prevResult)
	}
	return &skel.CmdArgs{
		ContainerID: p.containerID,
		Netns:       p.netns,
		IfName:      "eth0",
		Args:        fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", p.ref.Namespace, p.ref.Name, p.ref.UID),
		StdinData:   []byte(conf + "}"),
	}
}

// run runs cmd in the node's namespace and returns what it printed.
func (e *env) run(cmd func(*plugin.Plugin, *skel.CmdArgs) error, args *skel.CmdArgs) ([]byte, error) {
	var out bytes.Buffer
	p := plugin.New(&out, io.Discard)
	err := ns.WithNetNSPath(e.node, func(ns.NetNS) error { return cmd(p, args) })
	return out.Bytes(), err
}

func add(p *plugin.Plugin, a *skel.CmdArgs) error   { return p.Add(a) }
func del(p *plugin.Plugin, a *skel.CmdArgs) error   { return p.Del(a) }
func check(p *plugin.Plugin, a *skel.CmdArgs) error { return p.Check(a) }

// mustAdd runs ADD for p and returns its result, checked to be valid CNI 1.1.0.
func (e *env) mustAdd(p *pod) ([]byte, *types100.Result) {
	e.t.Helper()
	out, err := e.run(add, e.args(p, nil))
	if err != nil {
		e.t.Fatalf("ADD %s: %v", p.ref, err)
	}
	parsed, err := create.Create("1.1.0", out)
	if err != nil {
		e.t.Fatalf("ADD %s printed no valid CNI 1.1.0 result: %v\n%s", p.ref, err, out)
	}
	result, err := types100.NewResultFromResult(parsed)
	if err != nil {
		e.t.Fatal(err)
	}
	return out, result
}

// inNetNS runs fn in the namespace at path.
func inNetNS(t *testing.T, path string, fn func() error) {
	t.Helper()
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() }); err != nil {
		t.Fatalf("in %s: %v", path, err)
	}
}

// links returns the names of the links in the namespace at path.
func links(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	inNetNS(t, path, func() error {
		all, err := netlink.LinkList()
		for _, l := range all {
			names = append(names, l.Attrs().Name)
		}
		return err
	})
	return names
}

// assertOnlyLoopback checks that the namespace at path holds no link but lo.
func assertOnlyLoopback(t *testing.T, path string) {
	t.Helper()
	if got := links(t, path); len(got) != 1 || got[0] != "lo" {
		t.Errorf("links in %s = %v, want only lo", path, got)
	}
}
