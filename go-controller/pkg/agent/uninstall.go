package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/vishvananda/netlink"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
	"github.com/kovs-net/kovs/go-controller/pkg/ovsdaemon"
)

// cniBinary is the plugin binary the DaemonSet's init container installs.
const cniBinary = "kovs-cni"

// uninstallWatch tells whether the operator asked for kovs to be removed from the node:
// the DaemonSet running this agent was deleted while it carried
// nodestatus.UninstallAnnotation ("true"). Then the agent's shutdown cleans the node.
//
// The deletion alone is no such request: `kubectl delete ds --cascade=orphan` followed
// by a new apply (how immutable fields are changed, what GitOps tools do on replace)
// deletes the DaemonSet too, and its pods go on forwarding every pod's traffic. A
// DaemonSet of the same name that appears again takes the request back.
//
// The signal is the DaemonSet's last state as the agent's watch delivers it. `kubectl
// delete -k dist/` deletes the RBAC objects and the ServiceAccount before the DaemonSet,
// so the agent cannot ask the API at shutdown; a watch opened earlier keeps delivering
// events. When the agent does not see the request or the deletion, it leaves the node as
// it is: tearing the datapath down on a guess would cut traffic.
type uninstallWatch struct {
	removed atomic.Bool
}

// uninstallRequested tells whether d carries the operator's request to uninstall.
func uninstallRequested(d *appsv1.DaemonSet) bool {
	return d != nil && d.Annotations[nodestatus.UninstallAnnotation] == "true"
}

// watchUninstall starts watching the DaemonSet that owns the agent's pod. Without a pod
// identity (a process started by hand, the emulator sandbox) it watches nothing.
func (a *Agent) watchUninstall(ctx context.Context) {
	if a.cfg.PodName == "" || a.cfg.PodNamespace == "" {
		return
	}
	pod, err := a.pods.Pods(a.cfg.PodNamespace).Get(a.cfg.PodName)
	if err != nil {
		log.WithError(err).WithField("pod", a.cfg.PodNamespace+"/"+a.cfg.PodName).Warn("own pod not found: the node is not cleaned up on uninstall")
		return
	}
	ds := ""
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			ds = o.Name
		}
	}
	if ds == "" {
		log.WithField("pod", pod.Namespace+"/"+pod.Name).Info("not run by a DaemonSet: the node is not cleaned up on uninstall")
		return
	}
	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithNamespace(pod.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ds).String()
		}))
	informer := factory.Apps().V1().DaemonSets().Informer()
	l := log.WithField("daemonset", pod.Namespace+"/"+ds)
	// mark records the DaemonSet's state d; deleted when it is gone.
	mark := func(d *appsv1.DaemonSet, deleted bool) {
		deleting := deleted || (d != nil && d.DeletionTimestamp != nil)
		a.markUninstall(uninstallRequested(d))
		switch {
		case deleting && uninstallRequested(d):
			if !a.uninstall.removed.Swap(true) {
				l.Info("DaemonSet deleted with " + nodestatus.UninstallAnnotation + "=true: kovs is being uninstalled; the node is cleaned up at shutdown")
			}
		case deleting:
			a.uninstall.removed.Store(false)
			if deleted {
				l.Info("DaemonSet deleted without " + nodestatus.UninstallAnnotation + "=true: the node is left as it is (orphaned pods, a new apply)")
			}
		default:
			if a.uninstall.removed.Swap(false) {
				l.Info("DaemonSet is back: the node is no longer cleaned up at shutdown")
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d, _ := obj.(*appsv1.DaemonSet); mark(d, false) },
		UpdateFunc: func(_, obj any) { d, _ := obj.(*appsv1.DaemonSet); mark(d, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			d, _ := obj.(*appsv1.DaemonSet)
			mark(d, true)
		},
	}); err != nil {
		l.WithError(err).Warn("watch own DaemonSet")
		return
	}
	factory.Start(ctx.Done())
}

// cleanNodeIfUninstalled removes what kovs put on the node, once the operator asked for it
// and its DaemonSet is gone:
// br-int (its ports, flows and groups go with it; the gateway's addresses and routes with
// its port), the Service host rules, the masquerade table, the CNI socket and the kovs-cni binary. The CNI
// config goes first, so the runtime starts no new pod on kovs meanwhile.
func (a *Agent) cleanNodeIfUninstalled() {
	if !a.uninstall.removed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := log.WithField("node", a.cfg.NodeName)
	if err := removeCNIConf(a.cfg.CNIConfDir); err != nil {
		l.WithError(err).Error("uninstall: remove the CNI config")
	}
	// After any table write in flight; none is written after this.
	a.tables.removeForGood(serviceNFTable, masqueradeNFTable, tunnelGuardNFTable)
	removeServiceRoutes(a.cfg.GatewayName)
	if err := a.store.DeleteBridge(ctx, a.cfg.Bridge); err != nil {
		l.WithError(err).Error("uninstall: delete " + a.cfg.Bridge)
	}
	for _, name := range removeBridgeDevices([]string{a.cfg.Bridge, a.cfg.GatewayName}, bridgeDevicesWait) {
		l.WithField("device", name).Warn("uninstall: ovs-vswitchd had not removed the device of a deleted port: removed it")
	}
	a.markUninstall(false) // done (br-int and its devices are gone): OVS may stop
	for _, f := range []string{a.cfg.CNISocket, filepath.Join(a.cfg.CNIBinDir, cniBinary)} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			l.WithError(err).Error(fmt.Sprintf("uninstall: remove %s", f))
		}
	}
	l.WithField("bridge", a.cfg.Bridge).Info("uninstalled: kovs removed its bridge, CNI config, socket and binary from the node")
}

// bridgeDevicesWait bounds the wait for ovs-vswitchd to remove a deleted bridge's devices.
const bridgeDevicesWait = 5 * time.Second

// removeBridgeDevices returns once none of the kernel devices named is there (a deleted
// bridge's internal ports: the bridge's own and the gateway), waiting up to wait for
// ovs-vswitchd to remove them and then removing those left itself; it returns the names it
// removed. On the userspace datapath those devices are taps that ovs-vswitchd makes
// persistent and closes only once its datapath threads have let go of the port, after an
// RCU grace period that can end after ovs-vswitchd reported the bridge's removal applied
// (cur_cfg): a kovs-ovs stopped in between leaves them on the node (kovs-gw0 was left on a
// node in two full runs of TestRealNodes's uninstall).
func removeBridgeDevices(names []string, wait time.Duration) []string {
	// Subscribed before the first look: a device removed after it is an update.
	updates, done := make(chan netlink.LinkUpdate, 16), make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		log.WithError(err).Warn("uninstall: cannot watch the node's devices: removing a deleted bridge's devices at once")
		wait = 0
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		var left []netlink.Link
		for _, n := range names {
			if link, err := netlink.LinkByName(n); err == nil {
				left = append(left, link)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-updates:
			continue
		case <-timer.C:
		}
		var removed []string
		for _, link := range left {
			if err := netlink.LinkDel(link); err != nil {
				log.WithError(err).WithField("device", link.Attrs().Name).Error("uninstall: remove a deleted port's device")
				continue
			}
			removed = append(removed, link.Attrs().Name)
		}
		return removed
	}
}

// markUninstall keeps OVS's uninstall marker (ovsdaemon.UninstallMarker in the OVS run
// directory) in step with the operator's request: while it is there, a kovs-ovs stopped
// by the same `kubectl delete -k` as this agent waits until the agent has removed br-int
// through it. Without an OVS run directory there is nothing to mark.
func (a *Agent) markUninstall(requested bool) {
	if a.cfg.OVSRundir == "" {
		return
	}
	f := filepath.Join(a.cfg.OVSRundir, ovsdaemon.UninstallMarker)
	var err error
	if requested {
		err = os.WriteFile(f, nil, 0o644)
	} else if err = os.Remove(f); os.IsNotExist(err) {
		err = nil
	}
	if err != nil {
		log.WithError(err).WithField("file", f).Warn("uninstall marker for kovs-ovs")
	}
}
