package roottest

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
)

func TestCheck(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	prev, _ := e.mustAdd(p)

	if _, err := e.run(check, e.args(p, prev)); err != nil {
		t.Fatalf("CHECK right after ADD: %v", err)
	}
	c := e.agent.Calls(cnitest.OpCheck)
	if len(c) != 1 || c[0].Attach.HostIfName != cni.HostInterfaceName(p.containerID) || c[0].Attach.MAC != podConfig(1).MAC ||
		len(c[0].Attach.IPs) != 2 {
		t.Errorf("agent check calls = %+v", c)
	}

	e.agent.Fail(cnitest.OpCheck, cni.Errorf(cni.CodeUnknownContainer, "no port for sandbox %s", p.containerID))
	assertCheckFails(t, e, p, prev, types.ErrUnknownContainer, "no port for sandbox")
	e.agent.Fail(cnitest.OpCheck, nil)

	inNetNS(t, p.netns, func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, ipnet, _ := net.ParseCIDR("10.244.1.11/24")
		ipnet.IP = net.ParseIP("10.244.1.11")
		return netlink.AddrDel(link, &netlink.Addr{IPNet: ipnet})
	})
	assertCheckFails(t, e, p, prev, types.ErrInternal, "interface eth0 lacks address 10.244.1.11/24")
}

func assertCheckFails(t *testing.T, e *env, p *pod, prev []byte, code uint, msg string) {
	t.Helper()
	_, err := e.run(check, e.args(p, prev))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != code || !strings.Contains(te.Msg, msg) {
		t.Errorf("CHECK = %v, want code %d containing %q", err, code, msg)
	}
}
