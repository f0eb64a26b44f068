package roottest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
	"github.com/kovs-net/kovs/go-controller/pkg/cni/internal/ethtool"
)

func TestAddConfiguresThePod(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	hostName := cni.HostInterfaceName(p.containerID)
	e.agent.OnAdd(hostEndIsUp(e.node))

	_, result := e.mustAdd(p)

	assertResult(t, result, hostName, p.netns)
	inNetNS(t, p.netns, func() error { return assertPodInterface(podConfig(1)) })
	inNetNS(t, e.node, func() error { return assertHostEnd(hostName, 1450) })
	adds := e.agent.Calls(cnitest.OpAdd)
	want := cni.AddRequest{ContainerID: p.containerID, Netns: p.netns, IfName: "eth0", Pod: p.ref, HostIfName: hostName}
	if calls := e.agent.Calls(""); len(adds) != 1 || adds[0].Add != want || len(calls) != 1 {
		t.Errorf("agent calls = %+v, want one add with %+v", calls, want)
	}
}

// hostEndIsUp checks, when the agent is asked to add the pod, that the host end is in the
// node's namespace and up: the agent can add it to br-int at once.
func hostEndIsUp(node string) func(cni.AddRequest) error {
	return func(req cni.AddRequest) error {
		h, err := netns.GetFromPath(node)
		if err != nil {
			return err
		}
		defer func() { _ = h.Close() }()
		nl, err := netlink.NewHandleAt(h)
		if err != nil {
			return err
		}
		defer nl.Close()
		link, err := nl.LinkByName(req.HostIfName)
		if err != nil {
			return fmt.Errorf("host end at attach time: %w", err)
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("host end %s is down at attach time", req.HostIfName)
		}
		return nil
	}
}

// assertResult checks the ADD result of pod 1: the host end, the pod end in its
// sandbox, the addresses on the pod end with their gateways, and the routes.
func assertResult(t *testing.T, r *types100.Result, hostName, netnsPath string) {
	t.Helper()
	cfg := podConfig(1)
	if len(r.Interfaces) != 2 {
		t.Fatalf("result interfaces = %+v", r.Interfaces)
	}
	host, pod := r.Interfaces[0], r.Interfaces[1]
	if host.Name != hostName || host.Sandbox != "" || host.Mac == "" {
		t.Errorf("host interface = %+v, want %s in the node's namespace", host, hostName)
	}
	if pod.Name != "eth0" || pod.Mac != cfg.MAC || pod.Sandbox != netnsPath || pod.Mtu != cfg.MTU {
		t.Errorf("pod interface = %+v", pod)
	}
	var ips []string
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface != 1 {
			t.Errorf("IP %s is not on the pod interface", ip.Address.String())
		}
		ips = append(ips, ip.Address.String()+" gw "+ip.Gateway.String())
	}
	if want := "10.244.1.11/24 gw 10.244.1.1, fd00:10:244:1::11/64 gw fd00:10:244:1::1"; strings.Join(ips, ", ") != want {
		t.Errorf("result IPs = %v, want %s", ips, want)
	}
	var routes []string
	for _, rt := range r.Routes {
		routes = append(routes, rt.Dst.String()+" via "+rt.GW.String())
	}
	if want := "0.0.0.0/0 via 10.244.1.1, ::/0 via fd00:10:244:1::1, 10.96.0.0/12 via 10.244.1.1"; strings.Join(routes, ", ") != want {
		t.Errorf("result routes = %v, want %s", routes, want)
	}
}

// assertPodInterface checks eth0 in the current namespace against cfg.
func assertPodInterface(cfg *cni.PodNetworkConfig) error {
	link, err := netlink.LinkByName("eth0")
	if err != nil {
		return err
	}
	a := link.Attrs()
	var problems []string
	if a.HardwareAddr.String() != cfg.MAC || a.MTU != cfg.MTU || a.Flags&net.FlagUp == 0 {
		problems = append(problems, fmt.Sprintf("eth0: mac %s mtu %d flags %v", a.HardwareAddr, a.MTU, a.Flags))
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, ip := range cfg.IPs {
		if !hasAddr(addrs, ip.Address) {
			problems = append(problems, "missing address "+ip.Address)
		}
	}
	// The link-local address is the MAC's EUI-64, the only one br-int's spoof guard admits.
	if ll := linkLocalOf(a.HardwareAddr); !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == ll }) {
		problems = append(problems, fmt.Sprintf("no link-local address %s (EUI-64 of %s) in %v", ll, a.HardwareAddr, addrs))
	}
	routes, err := netlink.RouteList(link, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, want := range []string{"0.0.0.0/0 via 10.244.1.1", "::/0 via fd00:10:244:1::1", "10.96.0.0/12 via 10.244.1.1"} {
		if !hasRoute(routes, want) {
			problems = append(problems, fmt.Sprintf("missing route %s in %v", want, routes))
		}
	}
	if on, err := ethtool.TxChecksum("eth0"); err != nil || on != !cfg.DisableTxChecksumOffload {
		problems = append(problems, fmt.Sprintf("tx checksum offload on=%v (%v), want %v", on, err, !cfg.DisableTxChecksumOffload))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// hasAddr reports whether addrs holds cidr, usable at once (IPv6: not tentative).
func hasAddr(addrs []netlink.Addr, cidr string) bool {
	for _, a := range addrs {
		if a.IPNet.String() == cidr && a.Flags&unix.IFA_F_TENTATIVE == 0 {
			return true
		}
	}
	return false
}

func hasRoute(routes []netlink.Route, want string) bool {
	for _, r := range routes {
		dst := "0.0.0.0/0"
		if r.Family == unix.AF_INET6 {
			dst = "::/0"
		}
		if r.Dst != nil {
			dst = r.Dst.String()
		}
		if r.Gw != nil && dst+" via "+r.Gw.String() == want {
			return true
		}
	}
	return false
}

// assertHostEnd checks the host end in the current namespace: a veth, up, with the pod's
// MTU, and closed to the node's own network stack (the pod's frames are br-int's).
func assertHostEnd(name string, mtu int) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if link.Type() != "veth" || link.Attrs().MTU != mtu || link.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("host end %s: type %s mtu %d flags %v", name, link.Type(), link.Attrs().MTU, link.Attrs().Flags)
	}
	for key, want := range map[string]string{"ipv6/conf/%s/disable_ipv6": "1", "ipv4/conf/%s/rp_filter": "1",
		"ipv4/conf/%s/forwarding": "0", "ipv4/conf/%s/arp_ignore": "8"} {
		path := "/proc/sys/net/" + fmt.Sprintf(key, name)
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != want {
			return fmt.Errorf("host end %s: %s = %q (%v), want %s", name, path, strings.TrimSpace(string(b)), err, want)
		}
	}
	return nil
}

// linkLocalOf is the modified EUI-64 link-local address of mac, with a /64.
func linkLocalOf(mac net.HardwareAddr) string {
	ll := net.IP{0xfe, 0x80, 0, 0, 0, 0, 0, 0, mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return ll.String() + "/64"
}

func TestAddWithGatewayOutsideThePrefix(t *testing.T) {
	e := newEnv(t)
	cfg := &cni.PodNetworkConfig{
		IPs: []cni.IPConfig{{Address: "10.244.1.7/32", Gateway: "169.254.1.1"}},
		MAC: "0a:58:0a:f4:01:07",
		MTU: 1400,
	}
	p := e.newPod(7, cfg)
	e.mustAdd(p)
	inNetNS(t, p.netns, func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if !hasRoute(routes, "0.0.0.0/0 via 169.254.1.1") {
			return fmt.Errorf("no default route via the on-link gateway: %v", routes)
		}
		if on, err := ethtool.TxChecksum("eth0"); err != nil || !on {
			return fmt.Errorf("tx checksum offload turned off (%v) though not asked", err)
		}
		return nil
	})
}

func TestAttachFailureUndoesEverything(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(2, podConfig(2))
	e.agent.Fail(cnitest.OpAdd, cni.Errorf(cni.CodeInternal, "ovsdb transaction failed: referential integrity violation"))

	_, err := e.run(add, e.args(p, nil))

	var te *types.Error
	if !errors.As(err, &te) || te.Code != 999 ||
		!strings.Contains(te.Msg, "add pod default/web-2 to br-int (port "+cni.HostInterfaceName(p.containerID)+"): ovsdb transaction failed") {
		t.Errorf("ADD = %v, want code 999 saying the attach failed and why", err)
	}
	assertOnlyLoopback(t, e.node)
	assertOnlyLoopback(t, p.netns)
	if d := e.agent.Calls(cnitest.OpDetach); len(d) != 1 || d[0].Detach.ContainerID != p.containerID {
		t.Errorf("detach calls after a failed attach = %+v, want one for the sandbox", d)
	}
}

// TestAgentRefusalLeavesNothing: when the agent answers the ADD with try-again (its
// block is full, the pod's policy has not come), the veth is gone and the agent is told
// to detach, which releases whatever it allocated.
func TestAgentRefusalLeavesNothing(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(3, nil) // the agent has no network for it

	_, err := e.run(add, e.args(p, nil))

	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "no network set for pod default/web-3") {
		t.Errorf("ADD = %v, want code 11 with the agent's reason", err)
	}
	assertOnlyLoopback(t, e.node)
	assertOnlyLoopback(t, p.netns)
	if d := e.agent.Calls(cnitest.OpDetach); len(d) != 1 || d[0].Detach.ContainerID != p.containerID {
		t.Errorf("detach calls after a refused ADD = %+v, want one for the sandbox", d)
	}
}

func TestAddIntoGoneNetns(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(4, podConfig(4))
	p.netns = "/var/run/netns/kovs-cnit-never-created"

	_, err := e.run(add, e.args(p, nil))

	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidNetNS || !strings.Contains(te.Msg, "netns /var/run/netns/kovs-cnit-never-created is gone") {
		t.Errorf("ADD = %v, want code 8 saying the netns is gone", err)
	}
	assertOnlyLoopback(t, e.node)
}

// TestAddWithoutAgentLeavesNothing: with nothing serving the agent's socket, ADD fails
// with try-again naming the socket, and the veth it created is gone.
func TestAddWithoutAgentLeavesNothing(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(5, podConfig(5))
	e.socket = filepath.Join(t.TempDir(), "cni.sock")

	_, err := e.run(add, e.args(p, nil))

	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "kovs-agent not running: dial unix "+e.socket) {
		t.Errorf("ADD = %v, want code 11 saying kovs-agent is not running", err)
	}
	assertOnlyLoopback(t, e.node)
	assertOnlyLoopback(t, p.netns)
}
