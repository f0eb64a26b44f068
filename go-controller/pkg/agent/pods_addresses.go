package agent

import (
	"context"
	"fmt"
	"net/netip"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/agent/podaddr"
	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// ReasonAddressExhausted is the Event reason, on the pod and on the node, when the
// node's block has no address for a new pod.
const ReasonAddressExhausted = "PodAddressExhausted"

// extHighWater is the br-int external_ids key holding the recorded high water of the
// node's blocks (the value of ipam.HighWater.Annotation).
const extHighWater = "kovs.io/address-high-water"

// blockSizeFlags is what an operator changes when a node's block is full.
const blockSizeFlags = "kovs-controller --ipv4-block-size / --ipv6-block-size, ConfigMap kovs-config"

// bridgeHighWater keeps the Book's high water in br-int's external_ids: in the database
// that holds the pod ports, whose records it complements.
type bridgeHighWater struct {
	store  ovs.BridgeStore
	bridge string
}

func (s bridgeHighWater) RecordHighWater(ctx context.Context, hw ipam.HighWater) error {
	return s.store.SetBridgeExternalIDs(ctx, s.bridge, map[string]string{extHighWater: hw.Annotation()})
}

// openAddressBook builds the node's pod address allocator from what br-int holds: the
// restored pod ports (already in the desired state), the stale ones (whose addresses are
// released at once, to the back of the line), and the recorded high water. On the first
// start after an upgrade from a release where kovs-controller allocated, br-int records no
// high water: the Node's kovs.io/address-high-water annotation (the controller's record)
// is taken instead, and the running pods the API shows on this node with addresses but
// no port are imported too, so that no address in use is ever handed out again.
func (a *Agent) openAddressBook(ctx context.Context, self *corev1.Node, stale []ovs.PortInfo) (*podaddr.Book, error) {
	blocks, err := nodeSubnets(self)
	if err != nil {
		return nil, err
	}
	book, err := podaddr.New(a.cfg.NodeName, blocks, ipam.PoolOptions{Quarantine: a.cfg.AddressQuarantine},
		bridgeHighWater{store: a.store, bridge: a.cfg.Bridge}, blockSizeFlags)
	if err != nil {
		return nil, err
	}
	ids, err := a.store.BridgeExternalIDs(ctx, a.cfg.Bridge)
	if err != nil {
		return nil, fmt.Errorf("read the pod address high water of %s: %w", a.cfg.Bridge, err)
	}
	hw, imported, err := recordedHighWater(a.cfg.Bridge, ids, self)
	if err != nil {
		return nil, err
	}
	var records []podaddr.Record
	live := map[string]bool{}
	for name, pp := range a.state.Pods() {
		records = append(records, podaddr.Record{Port: name, Pod: pp.Namespace + "/" + pp.Name, UID: pp.UID, IPs: pp.IPs})
		live[pp.UID] = true
	}
	if err := book.Restore(records, hw); err != nil {
		return nil, fmt.Errorf("%w (the pod ports of bridge %s in the Open_vSwitch database; delete what is wrong, or the bridge to start over)", err, a.cfg.Bridge)
	}
	// The stale ports' pods are gone: their addresses go back, to the back of the line
	// (what cannot be taken, an address outside blocks the node got anew, is left).
	for _, port := range stale {
		pp, err := podPortFromIDs(port)
		if err != nil || pp.UID == "" || live[pp.UID] {
			continue
		}
		if err := book.Import(podaddr.Record{Port: port.Name, Pod: pp.Namespace + "/" + pp.Name, UID: pp.UID, IPs: pp.IPs}); err != nil {
			log.WithField("port", port.Name).WithError(err).Debug("stale port's addresses not taken back")
		}
		book.Release(pp.UID)
	}
	if imported {
		a.importRunningPods(book, live)
	}
	log.WithField("node", a.cfg.NodeName).WithField("blocks", book.String()).WithField("highWaterFromNode", imported).
		Info("pod addresses restored")
	return book, nil
}

// recordedHighWater reads br-int's record, or, when it has none, the Node's (imported).
func recordedHighWater(bridge string, ids map[string]string, self *corev1.Node) (hw ipam.HighWater, imported bool, err error) {
	if value, ok := ids[extHighWater]; ok {
		hw, err := ipam.ParseHighWater(value)
		if err != nil {
			return nil, false, &podaddr.CorruptError{Record: fmt.Sprintf("bridge %s external_ids:%s", bridge, extHighWater), Err: err}
		}
		return hw, false, nil
	}
	value, ok := self.Annotations[ipam.HighWaterAnnotationKey]
	if !ok {
		return ipam.HighWater{}, true, nil
	}
	hw, err = ipam.ParseHighWater(value)
	if err != nil {
		log.WithField("node", self.Name).WithError(err).Warn("ignoring the node's unreadable address high-water annotation")
		return ipam.HighWater{}, true, nil
	}
	return hw, true, nil
}

// importRunningPods records the addresses of the pods the API shows running on this node
// that no port holds (see openAddressBook).
func (a *Agent) importRunningPods(book *podaddr.Book, live map[string]bool) {
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		log.WithError(err).Warn("could not list the node's pods to import their addresses")
		return
	}
	for _, p := range pods {
		if p.Spec.HostNetwork || live[string(p.UID)] || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var ips []netip.Addr
		for _, s := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(s.IP); err == nil {
				ips = append(ips, ip.Unmap())
			}
		}
		if len(ips) == 0 {
			continue
		}
		err := book.Import(podaddr.Record{Port: "(none: status.podIPs)", Pod: p.Namespace + "/" + p.Name, UID: string(p.UID), IPs: ips})
		if err != nil {
			log.WithField("pod", p.Namespace+"/"+p.Name).WithError(err).Warn("running pod's addresses not imported")
		}
	}
}

// addressesExhausted tells the pod's and the node's Events that the node's block is full.
func (p *PodPorts) addressesExhausted(pod cni.PodRef, err error) {
	log.WithField("pod", pod.String()).WithError(err).Warn("no pod address left")
	if p.events == nil {
		return
	}
	msg := err.Error()
	p.events.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)},
		corev1.EventTypeWarning, ReasonAddressExhausted, msg)
	p.events.Event(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: p.node, UID: types.UID(p.node)},
		corev1.EventTypeWarning, ReasonAddressExhausted, fmt.Sprintf("pod %s: %s", pod, msg))
}
