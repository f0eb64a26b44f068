package agent

import (
	"context"
	"fmt"
)

// A pod's port asks ovs-vswitchd for an OpenFlow port number the agent chose
// (ofport_request), so that the pod's flows, which name that number, are installed while
// ovs-vswitchd creates the port instead of after it: an attach then costs the longer of the
// two steps, not their sum. Only kovs adds ports to br-int, one attach at a time
// (attachMu), and its tunnel and gateway ports ask for fixed numbers, so a number no port
// of br-int holds is the one ovs-vswitchd assigns; EnsurePort fails otherwise, and the
// attach is undone (plug).
const (
	// firstPodOFPort is the lowest number a pod's port asks for: below it are the tunnel's
	// and the gateway's.
	firstPodOFPort = gatewayOFPort + 1
	// lastPodOFPort is the highest OpenFlow port number a port can have (OFPP_MAX).
	lastPodOFPort = 65279
)

// requestOFPort is the number the port name asks for: the one it has if it is on br-int
// already (a repeated ADD), or else the next number after the last one asked for that no
// port of br-int and no pod of the state holds, as ovs-vswitchd itself goes on from its
// last number rather than reuse one just freed. Called with attachMu held.
func (p *PodPorts) requestOFPort(ctx context.Context, name string) (uint32, error) {
	ports, err := p.store.Ports(ctx, p.bridge)
	if err != nil {
		return 0, fmt.Errorf("choose an OpenFlow port number for %s: %w", name, err)
	}
	held := map[uint32]bool{}
	for _, port := range ports {
		if port.Name == name && port.Ofport > 0 {
			return uint32(port.Ofport), nil
		}
		if port.Ofport > 0 {
			held[uint32(port.Ofport)] = true
		}
	}
	for _, pod := range p.state.Pods() {
		held[pod.OFPort] = true
	}
	for range lastPodOFPort - firstPodOFPort + 1 {
		p.lastOFPort++
		if p.lastOFPort < firstPodOFPort || p.lastOFPort > lastPodOFPort {
			p.lastOFPort = firstPodOFPort
		}
		if !held[p.lastOFPort] {
			return p.lastOFPort, nil
		}
	}
	return 0, fmt.Errorf("choose an OpenFlow port number for %s: all of %d-%d are taken on %s (delete unused ports)",
		name, firstPodOFPort, lastPodOFPort, p.bridge)
}
