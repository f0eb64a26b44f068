package roottest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

func TestConcurrentPods(t *testing.T) {
	const pods = 20
	e := newEnv(t)
	all := make([]*pod, pods)
	for i := range all {
		all[i] = e.newPod(i, podConfig(i))
	}
	errs := make(chan error, 2*pods)
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.run(add, e.args(p, nil)); err != nil {
				errs <- fmt.Errorf("ADD %s: %w", p.ref, err)
				return
			}
			if err := podHasItsAddress(p); err != nil {
				errs <- fmt.Errorf("pod %s: %w", p.ref, err)
			}
			if _, err := e.run(del, e.args(p, nil)); err != nil {
				errs <- fmt.Errorf("DEL %s: %w", p.ref, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assertOnlyLoopback(t, e.node)
	for _, p := range all {
		assertOnlyLoopback(t, p.netns)
	}
}

// podHasItsAddress checks that the pod's eth0 has the address its config gave it, not
// another pod's.
func podHasItsAddress(p *pod) error {
	var i int
	if _, err := fmt.Sscanf(p.ref.Name, "web-%d", &i); err != nil {
		return err
	}
	want := podConfig(i).IPs[0].Address
	return ns.WithNetNSPath(p.netns, func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if !hasAddr(addrs, want) {
			return fmt.Errorf("eth0 has %v, want %s", addrs, want)
		}
		return nil
	})
}
