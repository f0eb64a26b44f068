package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// errNotThisPods is why a pod's address record is not (yet) its own: it names no pod UID,
// or another pod's (a copied kovs.io/pod-network annotation). kovs-controller records
// the pod's own addresses, so PodNetwork waits for that.
type errNotThisPods struct {
	pod       cni.PodRef
	uid, want string
}

func (e errNotThisPods) Error() string {
	if e.uid == "" {
		return fmt.Sprintf("the %s record of pod %s names no pod UID: kovs-controller has not recorded this pod's own addresses yet",
			ipam.PodNetworkAnnotationKey, e.pod)
	}
	return fmt.Sprintf("the %s record of pod %s is pod UID %s's, not this pod's (%s): a copy of another pod's record is never plugged",
		ipam.PodNetworkAnnotationKey, e.pod, e.uid, e.want)
}

// ownRecord checks that network was recorded for the pod of UID uid.
func ownRecord(ref cni.PodRef, uid string, network ipam.PodNetwork) error {
	if network.UID != uid {
		return errNotThisPods{pod: ref, uid: network.UID, want: uid}
	}
	return nil
}

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

// checkAttach holds an attach request to what kovs-controller allocated: the pod's own
// record (its UID) with exactly the request's MAC and addresses, which no other pod's
// port on this node holds. The pod's own earlier ports (a sandbox replaced without a DEL)
// are removed first. Called with attachMu held.
func (p *PodPorts) checkAttach(ctx context.Context, req cni.AttachRequest, port pipeline.PodPort) error {
	network, err := p.podNetwork(req.Pod)
	if err != nil {
		return cni.Errorf(cni.CodeTryAgainLater, "attach %s: %v", req.Pod, err)
	}
	if err := ownRecord(req.Pod, req.Pod.UID, network); err != nil {
		return cni.Errorf(cni.CodeTryAgainLater, "attach %s: %v", req.Pod, err)
	}
	want := network.IPs()
	slices.SortFunc(want, netip.Addr.Compare)
	got := slices.Clone(port.IPs)
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) || !strings.EqualFold(port.MAC.String(), network.MAC.String()) {
		return cni.Errorf(cni.CodeInvalidConfig, "attach %s: the request's addresses %v and MAC %s are not those kovs-controller allocated to the pod (%v, %s)",
			req.Pod, got, port.MAC, want, network.MAC)
	}
	pods := p.state.Pods()
	if name, holder, ip, ok := addressHolder(pods, req.HostIfName, req.Pod.UID, port.IPs); ok {
		return cni.Errorf(cni.CodeTryAgainLater, "attach %s: address %s is held by port %s of pod %s (UID %s) on this node: two pods never share an address",
			req.Pod, ip, name, holder, holder.UID)
	}
	for _, old := range sameSandboxOf(pods, req.HostIfName, req.Pod.UID) {
		log.WithField("pod", req.Pod.String()).WithField("port", old).Info("removing the port of the pod's replaced sandbox")
		if err := p.removePort(ctx, old); err != nil {
			return fmt.Errorf("attach %s: remove the port %s of its replaced sandbox: %w", req.Pod, old, err)
		}
	}
	return nil
}
