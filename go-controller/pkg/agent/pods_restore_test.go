package agent

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/cni"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs/ovsfake"
)

// TestRestartReconcilesPortsAgainstTheAPI: at start the agent restores the ports of the
// pods the API places on its node and removes, after the first sync, those of pods that
// are gone (their DEL ran while the agent was down) or were replaced by a pod of the same
// name, as the DEL doc comment promises.
func TestRestartReconcilesPortsAgainstTheAPI(t *testing.T) {
	ctx := context.Background()
	store := ovsfake.NewOVSDB()
	if err := store.EnsureBridge(ctx, ovs.BridgeSpec{Name: "br-int", DatapathType: ovs.DatapathNetdev}); err != nil {
		t.Fatal(err)
	}
	attach := func(name, sandbox, uid string, host int) cni.AttachRequest {
		return cni.AttachRequest{ContainerID: sandbox, Netns: "/var/run/netns/" + sandbox, IfName: "eth0",
			Pod: cni.PodRef{Namespace: "x", Name: name, UID: uid}, HostIfName: "kv" + sandbox, MAC: "0a:58:0a:f4:01:0a",
			IPs: []cni.IPConfig{{Address: "10.244.1." + string(rune('0'+host)) + "/24", Gateway: "10.244.1.1"}}}
	}
	for _, req := range []cni.AttachRequest{
		attach("live", "s1", "uid-live", 5),
		attach("gone", "s2", "uid-gone", 6),    // deleted while the agent was down
		attach("again", "s3", "uid-before", 7), // deleted and created again: a new UID
	} {
		if _, err := store.EnsurePort(ctx, "br-int", ovs.PortSpec{Name: req.HostIfName, ExternalIDs: portIDs(req)}); err != nil {
			t.Fatal(err)
		}
	}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, uid := range map[string]string{"live": "uid-live", "again": "uid-after"} {
		if err := pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID(uid)},
			Spec: corev1.PodSpec{NodeName: "node-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	state := NewNodeState(1, nil)
	state.SetNode(testNodeConfig())
	p := &PodPorts{bridge: "br-int", store: store, state: state, pods: corelisters.NewPodLister(pods)}

	restored, stale, err := p.restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if restored != 1 || len(state.Pods()) != 1 || state.Pods()["kvs1"].Name != "live" {
		t.Errorf("restored %d pods: %v; want x/live only", restored, state.Pods())
	}
	if err := p.removeStalePorts(ctx, stale); err != nil {
		t.Fatal(err)
	}
	ports, err := store.Ports(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, port := range ports {
		names = append(names, port.Name)
	}
	if slices.Contains(names, "kvs2") || slices.Contains(names, "kvs3") || !slices.Contains(names, "kvs1") {
		t.Errorf("ports after the reconciliation: %v; want kvs1 kept, kvs2 (pod gone) and kvs3 (pod replaced) removed", names)
	}
}
