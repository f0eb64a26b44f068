package agent

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// A deleted bridge's device that ovs-vswitchd left behind (a persistent tap, as the
// userspace datapath's internal ports are) is removed after the wait; one that goes
// away meanwhile is waited for, not removed. In a network namespace of the test's own.
func TestRemoveBridgeDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and tap devices")
	}
	name := scratchNetNS(t)
	netns, err := ns.GetNS("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	runtime.LockOSThread() // netlink's subscription socket opens in the thread's namespace
	defer runtime.UnlockOSThread()
	err = netns.Do(func(ns.NetNS) error {
		for _, tap := range []string{"left-gw0", "goes-br0"} {
			if out, err := exec.Command("ip", "tuntap", "add", "dev", tap, "mode", "tap").CombinedOutput(); err != nil {
				t.Fatalf("ip tuntap add %s: %v: %s", tap, err, out)
			}
		}
		// goes-br0 is removed by someone else while removeBridgeDevices waits for the
		// other: it must not be reported as removed by it.
		go func() {
			time.Sleep(200 * time.Millisecond) // the other remover's timing is the test's input
			_ = exec.Command("ip", "-n", name, "link", "del", "goes-br0").Run()
		}()
		removed := removeBridgeDevices([]string{"left-gw0", "goes-br0", "never-there"}, time.Second)
		if len(removed) != 1 || removed[0] != "left-gw0" {
			t.Errorf("removed %v, want [left-gw0]", removed)
		}
		for _, n := range []string{"left-gw0", "goes-br0"} {
			if _, err := netlink.LinkByName(n); err == nil {
				t.Errorf("%s is still there", n)
			}
		}
		start := time.Now()
		if removed := removeBridgeDevices([]string{"left-gw0", "goes-br0"}, time.Minute); removed != nil || time.Since(start) > 5*time.Second {
			t.Errorf("with nothing left: removed %v after %s, want nothing at once", removed, time.Since(start))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
