package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
)

// These tests need no root: every command here fails or finishes before touching a
// network namespace. The kernel side is tested in package roottest.

var webPod = cni.PodRef{Namespace: "default", Name: "web", UID: "0b8f6a3c-uid"}

const webPodArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=0b8f6a3c-uid"

func cmdArgs(socket, netns, cniArgs string) *skel.CmdArgs {
	return &skel.CmdArgs{
		ContainerID: "4f1c2a9b7e3d0c5a6b7c8d9e0f1a2b3c",
		Netns:       netns,
		IfName:      "eth0",
		Args:        cniArgs,
		StdinData:   []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni","socket":%q}`, socket)),
	}
}

func quietPlugin() (*Plugin, *bytes.Buffer) {
	var out bytes.Buffer
	return New(&out, io.Discard), &out
}

func missingSocket(t *testing.T) string { return filepath.Join(t.TempDir(), "cni.sock") }

func TestAddIntoAMissingNetnsCreatesNothing(t *testing.T) {
	agent := cnitest.NewAgent()
	agent.SetPodNetwork(webPod, &cni.PodNetworkConfig{MAC: "0a:58:0a:f4:01:05", MTU: 1450,
		IPs: []cni.IPConfig{{Address: "10.244.1.5/24", Gateway: "10.244.1.1"}}})
	p, out := quietPlugin()
	err := p.Add(cmdArgs(agent.Serve(t), "/var/run/netns/never-opened", webPodArgs))
	if err == nil {
		t.Fatal("ADD into a netns that does not exist succeeded")
	}
	if calls := agent.Calls(""); len(calls) != 0 {
		t.Errorf("agent calls = %+v, want none: nothing is allocated for a sandbox that cannot be set up", calls)
	}
	if out.Len() != 0 {
		t.Errorf("ADD printed %q on failure", out.String())
	}
	if _, err := linkByName(cni.HostInterfaceName("4f1c2a9b7e3d0c5a6b7c8d9e0f1a2b3c")); !isLinkNotFound(err) {
		t.Errorf("host end of the veth exists after a failed ADD (%v)", err)
	}
}

func TestAddWithoutPodArgs(t *testing.T) {
	agent := cnitest.NewAgent()
	p, _ := quietPlugin()
	err := p.Add(cmdArgs(agent.Serve(t), "/var/run/netns/never-opened", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default"))
	assertCNIError(t, err, types.ErrInvalidEnvironmentVariables, "CNI_ARGS lacks K8S_POD_NAME, K8S_POD_UID")
	if calls := agent.Calls(""); len(calls) != 0 {
		t.Errorf("agent called: %+v", calls)
	}
}

func TestDelWhenAgentNotRunningSucceeds(t *testing.T) {
	p, _ := quietPlugin()
	for _, netns := range []string{"", "/var/run/netns/kovs-cnit-gone"} {
		if err := p.Del(cmdArgs(missingSocket(t), netns, webPodArgs)); err != nil {
			t.Errorf("DEL (netns %q) with the agent not running = %v, want success", netns, err)
		}
	}
}

func TestDelReturnsTheAgentsError(t *testing.T) {
	agent := cnitest.NewAgent()
	agent.Fail(cnitest.OpDetach, errors.New("ovsdb transaction failed"))
	p, _ := quietPlugin()
	err := p.Del(cmdArgs(agent.Serve(t), "", webPodArgs))
	assertCNIError(t, err, 999, "detach the sandbox from br-int: ovsdb transaction failed")
}

func TestDelWithoutPodArgsDetachesByContainer(t *testing.T) {
	agent := cnitest.NewAgent()
	p, _ := quietPlugin()
	if err := p.Del(cmdArgs(agent.Serve(t), "", "")); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	calls := agent.Calls(cnitest.OpDetach)
	want := cni.DetachRequest{ContainerID: "4f1c2a9b7e3d0c5a6b7c8d9e0f1a2b3c", IfName: "eth0"}
	if len(calls) != 1 || calls[0].Detach != want {
		t.Errorf("detach calls = %+v, want one with %+v", calls, want)
	}
}

func TestGCForwardsValidAttachments(t *testing.T) {
	agent := cnitest.NewAgent()
	p, _ := quietPlugin()
	socket := agent.Serve(t)
	args := cmdArgs(socket, "", "")
	args.StdinData = []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni","socket":%q,`+
		`"cni.dev/valid-attachments":[{"containerID":"aaa","ifname":"eth0"},{"containerID":"bbb","ifname":"eth0"}]}`, socket))
	if err := p.GC(args); err != nil {
		t.Fatalf("GC: %v", err)
	}
	calls := agent.Calls(cnitest.OpGC)
	if len(calls) != 1 || len(calls[0].Valid) != 2 || calls[0].Valid[1] != (cni.Attachment{ContainerID: "bbb", IfName: "eth0"}) {
		t.Errorf("gc calls = %+v", calls)
	}
}

func TestStatus(t *testing.T) {
	agent := cnitest.NewAgent()
	socket := agent.Serve(t)
	p, _ := quietPlugin()
	if err := p.Status(cmdArgs(socket, "", "")); err != nil {
		t.Errorf("STATUS of a ready agent = %v", err)
	}
	agent.Fail(cnitest.OpStatus, cni.Errorf(cni.CodeNotAvailable, "waiting for the node's subnets from kovs-controller"))
	assertCNIError(t, p.Status(cmdArgs(socket, "", "")), types.ErrPluginNotAvailable,
		"kovs-agent not ready: waiting for the node's subnets from kovs-controller")
	assertCNIError(t, p.Status(cmdArgs(missingSocket(t), "", "")), types.ErrPluginNotAvailable, "kovs-agent not running")
}

func TestCheckNeedsPrevResult(t *testing.T) {
	agent := cnitest.NewAgent()
	p, _ := quietPlugin()
	err := p.Check(cmdArgs(agent.Serve(t), "/var/run/netns/never-opened", webPodArgs))
	assertCNIError(t, err, types.ErrInvalidNetworkConfig, "CHECK needs the ADD result (prevResult)")
}
