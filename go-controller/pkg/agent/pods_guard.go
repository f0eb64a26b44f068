package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// addressHolder is the local pod port, other than port and not of pod UID uid, that holds
// one of ips; ok is false when there is none.
func addressHolder(pods map[string]pipeline.PodPort, port, uid string, ips []netip.Addr) (name string, holder pipeline.PodPort, ip netip.Addr, ok bool) {
	for name, pp := range pods {
		if name == port || pp.UID == uid && uid != "" {
			continue
		}
		for _, held := range pp.IPs {
			if slices.Contains(ips, held) {
				return name, pp, held, true
			}
		}
	}
	return "", pipeline.PodPort{}, netip.Addr{}, false
}

// sameSandboxOf lists the other local ports of the pod of UID uid (ports of sandboxes
// of the pod that a runtime replaced without a DEL).
func sameSandboxOf(pods map[string]pipeline.PodPort, port, uid string) []string {
	var out []string
	for name, pp := range pods {
		if name != port && uid != "" && pp.UID == uid {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkAttach makes room for the pod's port: no other pod's port on this node may hold
// its addresses (the node's blocks never hand one out twice; this guards the state
// against a record restored wrong), and the pod's own earlier ports (a sandbox replaced
// without a DEL) are removed first, keeping their addresses, which are the pod's.
// Called with attachMu held.
func (p *PodPorts) checkAttach(ctx context.Context, req cni.AttachRequest, port pipeline.PodPort) error {
	pods := p.state.Pods()
	if name, holder, ip, ok := addressHolder(pods, req.HostIfName, req.Pod.UID, port.IPs); ok {
		return cni.Errorf(cni.CodeInternal, "attach %s: address %s is held by port %s of pod %s (UID %s) on this node: two pods never share an address",
			req.Pod, ip, name, holder, holder.UID)
	}
	for _, old := range sameSandboxOf(pods, req.HostIfName, req.Pod.UID) {
		log.WithField("pod", req.Pod.String()).WithField("port", old).Info("removing the port of the pod's replaced sandbox")
		if err := p.removePort(ctx, old, req.Pod.UID, false); err != nil {
			return fmt.Errorf("attach %s: remove the port %s of its replaced sandbox: %w", req.Pod, old, err)
		}
	}
	return nil
}
