package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/agent/podaddr"
	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// External IDs of a pod's OVS port: the pod's identity (design brief) and what the agent
// needs to program the pod's flows after a restart without asking the API.
const (
	extOwner     = "kovs.io/owner"
	extNamespace = "kovs.io/pod-namespace"
	extName      = "kovs.io/pod-name"
	extUID       = "kovs.io/pod-uid"
	extSandbox   = "kovs.io/sandbox"
	extIfName    = "kovs.io/if-name"
	extIPs       = "kovs.io/ip-addresses"
	extMAC       = "kovs.io/mac"
	extIfaceID   = "iface-id"
	ownerPod     = "pod"
)

// validationOFPort stands in for a pod's port number while its flows are validated, before
// OVS assigned the real one (any pod-range number will do).
const validationOFPort = 65000

// PodPorts is the agent's CNI handler: it answers the plugin's requests and keeps the pods'
// OVS ports and flows.
type PodPorts struct {
	bridge string
	store  ovs.Store
	state  *NodeState
	syncer *FlowSyncer
	pods   corelisters.PodLister
	mtu    int
	netdev bool
	// book hands out the pods' addresses from the node's blocks (pods_addresses.go).
	book *podaddr.Book
	// events records the Events of full blocks (nil: none); node is this node's name.
	events record.EventRecorder
	node   string
	// policyWait bounds the wait for a new pod's NetworkPolicy (when enabled).
	policyWait time.Duration
	readiness  func() error
	// admission is nil when a new pod may be set up (nil func: always): it refuses ADD,
	// not CNI STATUS, so a runtime keeps the node's network ready and its pods running
	// while new pods wait (a controller older than the agent).
	admission func() error
	// attachMu makes an attach's address checks and its entry into the state one step:
	// two pods never both pass the check for one address.
	attachMu sync.Mutex
	// meters keeps the pods' egress meters (pods_bandwidth.go).
	meters ovs.MeterClient
	// bandwidthMu orders the changes of limits: a port's limits and its entry into (or
	// removal from) the state are one step against syncBandwidth's pruning.
	bandwidthMu sync.Mutex
	// bandwidthWarned is the last bandwidth annotation error logged per pod.
	bandwidthWarned map[string]string
}

var _ cni.Handler = (*PodPorts)(nil)

// Add allocates the pod's addresses and MAC from the node's blocks (those the pod of
// that UID already holds, after a retried ADD), plugs the pod's host veth end into
// br-int keyed by the pod's identity, and returns the config of the pod end once the
// pod's flows are installed and, with NetworkPolicy, once the policy that selects the pod
// is: until then the pod's port is closed (see waitForPolicy). Nothing on its path asks
// the API server. Addresses it handed out are released again when it fails before the
// port is plugged; after that, kovs-cni's undo (a detach) releases them with the port.
func (p *PodPorts) Add(ctx context.Context, req cni.AddRequest) (*cni.PodNetworkConfig, error) {
	if err := p.readiness(); err != nil {
		return nil, cni.Errorf(cni.CodeTryAgainLater, "kovs-agent is not ready: %v", err)
	}
	if p.admission != nil {
		if err := p.admission(); err != nil {
			return nil, cni.Errorf(cni.CodeTryAgainLater, "kovs-agent accepts no new pod: %v", err)
		}
	}
	start := time.Now()
	// One step from the addresses to the port in the state: a DEL of the pod's earlier
	// sandbox never releases addresses this ADD is plugging.
	p.attachMu.Lock()
	network, fresh, err := p.allocate(ctx, req.Pod)
	if err != nil {
		p.attachMu.Unlock()
		return nil, err
	}
	allocated := time.Now()
	attach := attachRequestOf(req, network)
	port, err := podPort(attach)
	if err == nil {
		port.OFPort = validationOFPort // the real number comes from OVS below
		err = p.state.ValidatePod(port)
	}
	if err != nil {
		p.releaseFresh(req.Pod, fresh)
		p.attachMu.Unlock()
		return nil, cni.Errorf(cni.CodeInvalidConfig, "pod %s cannot be attached to this node: %v", req.Pod, err)
	}
	gen, ofport, err := p.plug(ctx, attach, port)
	if err != nil {
		p.releaseFresh(req.Pod, fresh)
	}
	p.attachMu.Unlock()
	if err != nil {
		return nil, err
	}
	plugged := time.Now()
	if err := p.syncer.WaitFor(ctx, gen); err != nil {
		return nil, fmt.Errorf("pod %s: %w", req.Pod, err)
	}
	synced := time.Now()
	if err := p.waitForPolicy(ctx, req.Pod); err != nil {
		return nil, err
	}
	// Where an ADD spends its time: the addresses, the port (OVSDB and ovs-vswitchd), the
	// pod's flows (the flow sync), its NetworkPolicy's flows.
	log.WithField("pod", req.Pod.String()).WithField("ofport", ofport).WithField("port", req.HostIfName).
		WithField("ips", network.IPs()).
		WithField("addresses-took", allocated.Sub(start).Round(10*time.Microsecond)).
		WithField("port-took", plugged.Sub(allocated).Round(10*time.Microsecond)).
		WithField("flows-took", synced.Sub(plugged).Round(10*time.Microsecond)).
		WithField("policy-took", time.Since(synced).Round(10*time.Microsecond)).Info("pod attached")
	return p.configOf(network), nil
}

// allocate returns the pod's network from the node's blocks; fresh says whether this call
// handed the addresses out (false: the pod of that UID held them already).
func (p *PodPorts) allocate(ctx context.Context, pod cni.PodRef) (ipam.PodNetwork, bool, error) {
	held := len(p.book.Lookup(pod.UID)) > 0
	addrs, err := p.book.Allocate(ctx, pod.UID)
	if err != nil {
		if errors.Is(err, ipam.ErrExhausted) {
			p.addressesExhausted(pod, err)
			return ipam.PodNetwork{}, false, cni.Errorf(cni.CodeTryAgainLater, "no address for pod %s: %v", pod, err)
		}
		return ipam.PodNetwork{}, false, cni.Errorf(cni.CodeTryAgainLater, "allocate the addresses of pod %s: %v", pod, err)
	}
	network, err := ipam.NewPodNetwork(addrs)
	if err != nil {
		if !held {
			p.book.Release(pod.UID)
		}
		return ipam.PodNetwork{}, false, cni.Errorf(cni.CodeInternal, "pod %s: %v", pod, err)
	}
	network.UID = pod.UID
	return network, !held, nil
}

// releaseFresh gives back the addresses an Add handed out when it failed before the
// pod's port held them. Called with attachMu held.
func (p *PodPorts) releaseFresh(pod cni.PodRef, fresh bool) {
	if fresh && !p.portsHold(pod.UID, "") {
		p.book.Release(pod.UID)
	}
}

// attachRequestOf is the port the agent plugs for an ADD with the pod's network.
func attachRequestOf(req cni.AddRequest, n ipam.PodNetwork) cni.AttachRequest {
	return cni.AttachRequest{ContainerID: req.ContainerID, Netns: req.Netns, IfName: req.IfName, Pod: req.Pod,
		HostIfName: req.HostIfName, MAC: n.MAC.String(), IPs: ipConfigs(n)}
}

func (p *PodPorts) configOf(n ipam.PodNetwork) *cni.PodNetworkConfig {
	return &cni.PodNetworkConfig{MAC: n.MAC.String(), MTU: p.mtu, DisableTxChecksumOffload: p.netdev, IPs: ipConfigs(n)}
}

// ipConfigs is the pod network's addresses in the CNI protocol's form.
func ipConfigs(n ipam.PodNetwork) []cni.IPConfig {
	out := make([]cni.IPConfig, 0, len(n.Addresses))
	for _, a := range n.Addresses {
		out = append(out, cni.IPConfig{Address: a.Address.String(), Gateway: a.Gateway.String()})
	}
	return out
}

// plug makes room for the port (checkAttach), adds it to br-int and puts the pod in the desired state; it returns the state's generation
// that has the pod. Called with attachMu held.
func (p *PodPorts) plug(ctx context.Context, req cni.AttachRequest, port pipeline.PodPort) (gen uint64, ofport uint32, err error) {
	if err := p.checkAttach(ctx, req, port); err != nil {
		return 0, 0, err
	}
	n, err := p.store.EnsurePort(ctx, p.bridge, ovs.PortSpec{Name: req.HostIfName, ExternalIDs: portIDs(req)})
	if err != nil {
		return 0, 0, fmt.Errorf("add port %s of pod %s to %s: %w", req.HostIfName, req.Pod, p.bridge, err)
	}
	port.OFPort = uint32(n)
	// The limits are in place before the pod's flows: it never runs unlimited first.
	p.bandwidthMu.Lock()
	defer p.bandwidthMu.Unlock()
	if err := p.applyLimits(ctx, &port, p.limitsOf(req.Pod.Namespace, req.Pod.Name, req.Pod.UID), nil); err != nil {
		return 0, 0, err
	}
	return p.state.SetPod(req.HostIfName, port), port.OFPort, nil
}

// Detach removes the sandbox's port and its flows. Missing is success.
func (p *PodPorts) Detach(ctx context.Context, req cni.DetachRequest) error {
	ports, err := p.store.FindPorts(ctx, p.bridge, extSandbox, req.ContainerID)
	if err != nil {
		return err
	}
	for _, port := range ports {
		if port.ExternalIDs[extIfName] != "" && port.ExternalIDs[extIfName] != req.IfName {
			continue
		}
		if err := p.removePort(ctx, port.Name, port.ExternalIDs[extUID], true); err != nil {
			return err
		}
		log.WithField("pod", port.ExternalIDs[extNamespace]+"/"+port.ExternalIDs[extName]).WithField("port", port.Name).Info("pod detached")
	}
	return nil
}

// removePort deletes the pod's flows first (so no flow ever points at a reused ofport),
// then the port. With release, the addresses of the port's pod (uid) go back to the
// node's blocks once no other port of that pod holds them; a port removed to make room
// for the same pod's new sandbox keeps them (release false).
func (p *PodPorts) removePort(ctx context.Context, name, uid string, release bool) error {
	if err := p.unplug(ctx, name); err != nil {
		return err
	}
	if release && uid != "" {
		p.attachMu.Lock()
		defer p.attachMu.Unlock()
		if !p.portsHold(uid, "") {
			if ips := p.book.Release(uid); len(ips) > 0 {
				log.WithField("port", name).WithField("uid", uid).WithField("ips", ips).Debug("pod addresses released")
			}
		}
	}
	return nil
}

func (p *PodPorts) unplug(ctx context.Context, name string) error {
	p.bandwidthMu.Lock()
	defer p.bandwidthMu.Unlock()
	pp, had := p.state.Pods()[name]
	gen := p.state.DeletePod(name)
	if err := p.syncer.WaitFor(ctx, gen); err != nil {
		return err
	}
	for _, id := range []uint32{pp.EgressMeter, pp.IngressMeter} {
		if had && id != 0 && p.meters != nil {
			if err := p.meters.DeleteMeter(ctx, id); err != nil {
				return err
			}
		}
	}
	return p.store.DeletePort(ctx, p.bridge, name)
}

// portsHold reports whether a port of the pod of uid other than except is in the desired
// state.
func (p *PodPorts) portsHold(uid, except string) bool {
	return len(sameSandboxOf(p.state.Pods(), except, uid)) > 0
}

// Check verifies that the pod's port is on br-int and its flows are installed.
func (p *PodPorts) Check(ctx context.Context, req cni.AttachRequest) error {
	ports, err := p.store.FindPorts(ctx, p.bridge, extSandbox, req.ContainerID)
	if err != nil {
		return err
	}
	for _, port := range ports {
		if port.Name != req.HostIfName {
			continue
		}
		if port.Ofport <= 0 {
			return fmt.Errorf("port %s of pod %s has no OpenFlow port: %s", port.Name, req.Pod, port.Error)
		}
		if _, ok := p.state.Pods()[port.Name]; !ok {
			return fmt.Errorf("pod %s has a port but no flows", req.Pod)
		}
		gen := p.state.generationNow()
		return p.syncer.WaitFor(ctx, gen)
	}
	return fmt.Errorf("pod %s has no port %s on %s", req.Pod, req.HostIfName, p.bridge)
}

// GC removes the ports of sandboxes the runtime no longer has, except the only port of a
// pod the API shows running on this node (runningPodPorts): a GC with an empty or wrong
// valid list, from whatever local process, cannot unplug running pods. Those ports are
// kept and named in the error.
func (p *PodPorts) GC(ctx context.Context, valid []cni.Attachment) error {
	keep := map[cni.Attachment]bool{}
	for _, a := range valid {
		keep[a] = true
	}
	ports, err := p.store.FindPorts(ctx, p.bridge, extOwner, ownerPod)
	if err != nil {
		return err
	}
	var stale []ovs.PortInfo
	kept := map[string]bool{} // pod UIDs with a port the list keeps
	for _, port := range ports {
		a := cni.Attachment{ContainerID: port.ExternalIDs[extSandbox], IfName: port.ExternalIDs[extIfName]}
		if keep[a] {
			kept[port.ExternalIDs[extUID]] = true
			continue
		}
		stale = append(stale, port)
	}
	var errs []error
	var refused []string
	for _, port := range stale {
		if pod, running := p.runningPod(port); running && !kept[port.ExternalIDs[extUID]] {
			refused = append(refused, fmt.Sprintf("%s (port %s)", pod, port.Name))
			continue
		}
		if err := p.removePort(ctx, port.Name, port.ExternalIDs[extUID], true); err != nil {
			errs = append(errs, err)
		} else {
			log.WithField("port", port.Name).WithField("sandbox", port.ExternalIDs[extSandbox]).Info("garbage-collected stale pod port")
		}
	}
	if len(refused) > 0 {
		log.WithField("pods", refused).Warn("CNI GC would remove the ports of pods running on this node: kept")
		errs = append(errs, cni.Errorf(cni.CodeInvalidConfig,
			"GC kept the ports of pods the API shows running on this node, which the valid list omits: %s", strings.Join(refused, ", ")))
	}
	return errors.Join(errs...)
}

// runningPod reports whether the port's pod (its namespace, name and UID) is one the API
// shows on this node and not finished or being deleted.
func (p *PodPorts) runningPod(port ovs.PortInfo) (string, bool) {
	ids := port.ExternalIDs
	ref := ids[extNamespace] + "/" + ids[extName]
	pod, err := p.pods.Pods(ids[extNamespace]).Get(ids[extName])
	if err != nil || string(pod.UID) != ids[extUID] || pod.DeletionTimestamp != nil {
		return ref, false
	}
	return ref, pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// Status is nil once the node is programmed.
func (p *PodPorts) Status(context.Context) error {
	if err := p.readiness(); err != nil {
		return cni.Errorf(cni.CodeNotAvailable, "kovs-agent is not ready: %v", err)
	}
	return nil
}

// restore loads the pod ports already on br-int (an agent restart) into the desired state,
// so the first sync keeps their flows instead of dropping them. It reconciles the ports
// against the pods the API places on this node: the ports of pods that are gone (a DEL
// while the agent was down, which removes the veth and leaves the port) or replaced (the
// same name, another UID) are not restored but returned, for removeStalePorts to delete
// once the first sync has removed their flows.
func (p *PodPorts) restore(ctx context.Context) (int, []ovs.PortInfo, error) {
	ports, err := p.store.FindPorts(ctx, p.bridge, extOwner, ownerPod)
	if err != nil {
		return 0, nil, err
	}
	// One listing of the meters for every restored port's limits; without it (it failed),
	// each port's meters are set, and SetMeter reports the failure.
	var meters map[uint32]ovs.Meter
	if len(ports) > 0 {
		meters, _ = p.dumpMeters(ctx)
	}
	n := 0
	var stale []ovs.PortInfo
	for _, port := range ports {
		if why, err := p.staleness(port); err != nil {
			return 0, nil, err
		} else if why != "" {
			log.WithField("port", port.Name).WithField("pod", port.ExternalIDs[extNamespace]+"/"+port.ExternalIDs[extName]).
				WithField("reason", why).Info("pod port is stale: removing it after the first flow sync")
			stale = append(stale, port)
			continue
		}
		pp, err := podPortFromIDs(port)
		if err != nil || port.Ofport <= 0 {
			log.WithField("port", port.Name).WithError(err).Warn("pod port not restored")
			continue
		}
		p.restoreLimits(ctx, port.Name, &pp, meters)
		p.state.SetPod(port.Name, pp)
		n++
	}
	return n, stale, nil
}

// staleness says why a pod port no longer belongs on br-int ("" if it does): its pod is
// not on this node in the API, or is another pod of the same name.
func (p *PodPorts) staleness(port ovs.PortInfo) (string, error) {
	ids := port.ExternalIDs
	pod, err := p.pods.Pods(ids[extNamespace]).Get(ids[extName])
	switch {
	case apierrors.IsNotFound(err):
		return "the pod is no longer on this node", nil
	case err != nil:
		return "", fmt.Errorf("look up the pod of port %s: %w", port.Name, err)
	case ids[extUID] != "" && string(pod.UID) != ids[extUID]:
		return fmt.Sprintf("the pod is another of the same name (UID %s, the port's %s)", pod.UID, ids[extUID]), nil
	}
	return "", nil
}

// removeStalePorts deletes the ports restore found stale. Their flows, which the previous
// incarnation installed, are gone with the first sync, so no flow points at their ofports.
// (Their addresses went back to the node's blocks when the address book opened.)
func (p *PodPorts) removeStalePorts(ctx context.Context, stale []ovs.PortInfo) error {
	var errs []error
	for _, port := range stale {
		if err := p.store.DeletePort(ctx, p.bridge, port.Name); err != nil {
			errs = append(errs, fmt.Errorf("remove stale pod port %s: %w", port.Name, err))
			continue
		}

		log.WithField("port", port.Name).WithField("pod", port.ExternalIDs[extNamespace]+"/"+port.ExternalIDs[extName]).
			Info("stale pod port removed")
	}
	return errors.Join(errs...)
}

func portIDs(req cni.AttachRequest) map[string]string {
	ips := make([]string, 0, len(req.IPs))
	for _, ip := range req.IPs {
		ips = append(ips, ip.Address)
	}
	return map[string]string{
		extOwner: ownerPod, extNamespace: req.Pod.Namespace, extName: req.Pod.Name, extUID: req.Pod.UID,
		extSandbox: req.ContainerID, extIfName: req.IfName, extIPs: strings.Join(ips, ","), extMAC: req.MAC,
		extIfaceID: req.Pod.Namespace + "_" + req.Pod.Name,
	}
}

func podPort(req cni.AttachRequest) (pipeline.PodPort, error) {
	return podPortFromIDs(ovs.PortInfo{Name: req.HostIfName, ExternalIDs: portIDs(req)})
}

func podPortFromIDs(port ovs.PortInfo) (pipeline.PodPort, error) {
	ids := port.ExternalIDs
	mac, err := net.ParseMAC(ids[extMAC])
	if err != nil {
		return pipeline.PodPort{}, fmt.Errorf("port %s: MAC: %w", port.Name, err)
	}
	pp := pipeline.PodPort{Namespace: ids[extNamespace], Name: ids[extName], UID: ids[extUID],
		OFPort: uint32(max(port.Ofport, 0)), MAC: mac}
	for _, s := range strings.Split(ids[extIPs], ",") {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return pipeline.PodPort{}, fmt.Errorf("port %s: address %q: %w", port.Name, s, err)
		}
		pp.IPs = append(pp.IPs, prefix.Addr())
	}
	return pp, nil
}
