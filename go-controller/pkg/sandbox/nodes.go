package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

const (
	underlayBridge = "ul0"
	// UplinkBridge is the OVS bridge in each node namespace that owns the uplink and carries
	// the node's underlay address: ovs-vswitchd routes and resolves tunnel traffic itself,
	// so the tunnel endpoint address must live on an OVS bridge.
	UplinkBridge = "br-ex"
	uplink       = "eth0"
	ovsSchema    = "/usr/share/openvswitch/vswitch.ovsschema"
)

// underlay creates the namespace with the Linux bridge every node's uplink plugs into.
func (u *upRun) underlay() error {
	ns := u.layout.UnderlayNetNS()
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", underlayBridge, "type", "bridge"},
		{"link", "set", underlayBridge, "up"},
	} {
		if err := runIn(ns, "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// node creates one node: its namespace, its uplink into the underlay, and then either
// (emulator) its own ovsdb-server and ovs-vswitchd (userspace datapath), br-ex with the
// node's address and its node emulator, or (real node) the node's address on eth0, its
// mount namespace and containerd; a real node gets OVS from dist's kovs-ovs DaemonSet.
func (u *upRun) node(n Node) error {
	l := u.layout
	ns := l.NodeNetNS(n.Name)
	for _, d := range []string{l.OVSDir(n.Name), l.CNIConfDir(n.Name), l.CNIBinDir(n.Name), l.CNICacheDir(n.Name)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	if err := u.uplink(n, ns); err != nil {
		return fmt.Errorf("node %s uplink: %w", n.Name, err)
	}
	if err := writeKubeconfig(l.NodeKubeconfig(n.Name), fmt.Sprintf("https://127.0.0.1:%d", NodeAPIServerPort), l.PKIDir()); err != nil {
		return err
	}
	if u.opts.Runtime == RuntimeContainerd {
		// A real node boots with its address on eth0; Open vSwitch comes with kovs, in
		// dist's kovs-ovs DaemonSet, and br-ex takes the address over then
		// (uplinkBridges).
		if err := u.uplinkAddresses(n, ns, uplink); err != nil {
			return fmt.Errorf("node %s uplink addresses: %w", n.Name, err)
		}
		return u.realNode(n)
	}
	if err := u.startOVS(n, ns); err != nil {
		return fmt.Errorf("node %s OVS: %w", n.Name, err)
	}
	if err := u.uplinkBridge(n, ns); err != nil {
		return fmt.Errorf("node %s %s: %w", n.Name, UplinkBridge, err)
	}
	_, err := l.start(u.emulator(n))
	return err
}

// uplink connects the node namespace's eth0 to the underlay bridge.
func (u *upRun) uplink(n Node, ns string) error {
	ul := u.layout.UnderlayNetNS()
	if err := run("ip", "link", "add", n.Name, "netns", ul, "type", "veth", "peer", "name", uplink, "netns", ns); err != nil {
		return err
	}
	if err := runIn(ul, "ip", "link", "set", n.Name, "master", underlayBridge, "up"); err != nil {
		return err
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"link", "set", uplink, "up"}} {
		if err := runIn(ns, "ip", args...); err != nil {
			return err
		}
	}
	// Linux would answer ARP for br-ex's address on eth0 too; only OVS should.
	return runIn(ns, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
}

// startOVS runs the node's own ovsdb-server and ovs-vswitchd inside its namespace, each
// with its own database, sockets and run directory.
func (u *upRun) startOVS(n Node, ns string) error {
	l := u.layout
	dir := l.OVSDir(n.Name)
	db := filepath.Join(dir, "conf.db")
	if err := run("ovsdb-tool", "create", db, ovsSchema); err != nil {
		return err
	}
	env := []string{"OVS_RUNDIR=" + dir, "OVS_LOGDIR=" + dir, "OVS_DBDIR=" + dir}
	if _, err := l.start(Process{Name: n.Name + "-ovsdb-server", Path: "ovsdb-server", NetNS: ns, Env: env, Args: []string{
		db, "--remote=punix:" + l.OVSDBSocket(n.Name), "--unixctl=" + filepath.Join(dir, "ovsdb-server.ctl"),
		"--log-file=" + filepath.Join(dir, "ovsdb-server.log"), "-vconsole:off", "-vsyslog:off",
	}}); err != nil {
		return err
	}
	if err := waitFor(u.ctx, 20*time.Second, "ovsdb-server socket of "+n.Name, func() error {
		return run("ovs-vsctl", "--db=unix:"+l.OVSDBSocket(n.Name), "--timeout=5", "--no-wait", "init")
	}); err != nil {
		return err
	}
	_, err := l.start(Process{Name: n.Name + "-ovs-vswitchd", Path: "ovs-vswitchd", NetNS: ns, Env: env, Args: []string{
		"unix:" + l.OVSDBSocket(n.Name), "--unixctl=" + OVSVswitchdCtl(l, n.Name),
		"--log-file=" + filepath.Join(dir, "ovs-vswitchd.log"), "-vconsole:off", "-vsyslog:off",
	}})
	return err
}

// OVSVswitchdCtl is the unixctl socket of a node's ovs-vswitchd (for ovs-appctl -t).
func OVSVswitchdCtl(l Layout, node string) string {
	return filepath.Join(l.OVSDir(node), "ovs-vswitchd.ctl")
}

// uplinkBridge creates br-ex (netdev) owning eth0 and puts the node's addresses on it.
func (u *upRun) uplinkBridge(n Node, ns string) error {
	if err := u.makeUplinkBridge(n, ns); err != nil {
		return err
	}
	if err := u.uplinkAddresses(n, ns, UplinkBridge); err != nil {
		return err
	}
	return runIn(ns, "ip", "link", "set", UplinkBridge, "up")
}

// makeUplinkBridge creates br-ex (netdev) with eth0 as its port and waits for its device.
func (u *upRun) makeUplinkBridge(n Node, ns string) error {
	if err := vsctl(u.layout, n.Name, "--may-exist", "add-br", UplinkBridge,
		"--", "set", "bridge", UplinkBridge, "datapath_type=netdev", "other_config:hwaddr="+strconv.Quote(n.MAC),
		"--", "--may-exist", "add-port", UplinkBridge, uplink); err != nil {
		return err
	}
	return waitFor(u.ctx, 20*time.Second, UplinkBridge+" to appear in "+n.Name, func() error {
		return runIn(ns, "ip", "link", "show", UplinkBridge)
	})
}

// uplinkAddresses puts the node's underlay addresses on dev.
func (u *upRun) uplinkAddresses(n Node, ns, dev string) error {
	for _, ip := range n.IPs {
		if err := runIn(ns, "ip", addrArgs("add", ip, dev)...); err != nil {
			return err
		}
	}
	return nil
}

// addrArgs are ip(8)'s arguments to add or del one of a node's underlay addresses on dev.
func addrArgs(op, ip, dev string) []string {
	args := []string{"addr", op, ip + "/" + strconv.Itoa(underlayPrefix(ip).Bits()), "dev", dev}
	if op == "add" && netip.MustParseAddr(ip).Is6() {
		args = append(args, "nodad")
	}
	return args
}

func underlayPrefix(ip string) netip.Prefix {
	if netip.MustParseAddr(ip).Is4() {
		return underlayV4
	}
	return underlayV6
}

// vsctl runs ovs-vsctl against a node's database, waiting for ovs-vswitchd to apply it.
func vsctl(l Layout, node string, args ...string) error {
	return run("ovs-vsctl", append([]string{"--db=unix:" + l.OVSDBSocket(node), "--timeout=30"}, args...)...)
}

// emulator is the node emulator process: it runs in the root namespace (it talks to
// kube-apiserver on loopback) and enters the node and pod namespaces where it must.
func (u *upRun) emulator(n Node) Process {
	return Process{Name: n.Name + "-emulator", Path: u.opts.SelfPath, Args: []string{
		"--name", u.layout.Name, "--root", u.layout.Root, "node-emulator", "--node", n.Name,
	}}
}
