package agent

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// TestServiceRoutesResyncQuietly: a full host resync (every hostResync) must not announce
// the ClusterIP routes again when they are as they should be. ovs-vswitchd flushes and
// rereads its route table at every route announcement, and an upcall in between finds no
// route to its tunnel peer (its packet is dropped); IPv4 never announced an identical
// replacement, IPv6 did. A changed route (the MTU) is still replaced. The announcements
// are read up to a sentinel route added afterwards, so that none can still be on its way.
func TestServiceRoutesResyncQuietly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	name := scratchNetNS(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("-n", name, "link", "add", "kovs-gw0", "type", "veth", "peer", "name", "gw-peer")
	ip("-n", name, "link", "set", "kovs-gw0", "up")
	// The gateway has the node's pod addresses (an IPv4 next hop on-link needs one).
	ip("-n", name, "addr", "add", "10.244.0.1/24", "dev", "kovs-gw0")
	ip("-n", name, "addr", "add", "fd00:10:244::1/64", "dev", "kovs-gw0", "nodad")
	ip("-n", name, "link", "set", "gw-peer", "up")
	inNS := func(f func() error) {
		t.Helper()
		if err := ns.WithNetNSPath("/run/netns/"+name, func(ns.NetNS) error { return f() }); err != nil {
			t.Fatal(err)
		}
	}
	handle, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer handle.Close()

	h := &serviceHost{gateway: "kovs-gw0", mtu: 1400, families: map[bool]bool{false: true, true: true}}
	ports := []pipeline.ServicePort{{ClusterIP: netip.MustParseAddr("10.96.0.10")}, {ClusterIP: netip.MustParseAddr("fd00:10:96::a")}}
	inNS(func() error { return h.syncRoutes(ports) })

	updates, done := make(chan netlink.RouteUpdate, 256), make(chan struct{})
	defer close(done)
	if err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{Namespace: &handle}); err != nil {
		t.Fatal(err)
	}
	sentinels := []string{"192.0.2.0/24", "192.0.2.0/25", "192.0.2.128/25"}
	// announced is the service routes announced before the next sentinel route.
	announced := func(sentinel string) []string {
		t.Helper()
		_, dst, _ := net.ParseCIDR(sentinel)
		inNS(func() error {
			link, err := netlink.LinkByName("kovs-gw0")
			if err != nil {
				return err
			}
			return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK})
		})
		var got []string
		timeout := time.After(10 * time.Second)
		for {
			select {
			case u := <-updates:
				if u.Dst == nil {
					continue
				}
				if u.Dst.String() == sentinel {
					slices.Sort(got)
					return got
				}
				if u.Protocol == routeProtoKovs {
					got = append(got, u.Dst.String())
				}
			case <-timeout:
				t.Fatalf("the sentinel route %s was never announced", sentinel)
			}
		}
	}

	h.lastVIPs = nil // what a full resync does
	inNS(func() error { return h.syncRoutes(ports) })
	if got := announced(sentinels[0]); len(got) != 0 {
		t.Errorf("a full resync of unchanged routes announced %v", got)
	}
	h.lastVIPs, h.mtu = nil, 1300
	inNS(func() error { return h.syncRoutes(ports) })
	want := []string{"10.96.0.10/32", "fd00:10:96::a/128", "fd00:6b6f:7673::fd/128", pipeline.HairpinSNATv4.String() + "/32"}
	slices.Sort(want)
	if got := announced(sentinels[1]); !slices.Equal(got, want) {
		t.Errorf("a new MTU replaced %v, want %v", got, want)
	}
	h.lastVIPs = nil
	inNS(func() error { return h.syncRoutes(ports) })
	if got := announced(sentinels[2]); len(got) != 0 {
		t.Errorf("a full resync after the MTU change announced %v", got)
	}
}
