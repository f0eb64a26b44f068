package cachetrim

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/addresses"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/ipam"
	"github.com/kovs-net/kovs/go-controller/pkg/controller/networkpolicy"
)

// noisyMeta is object metadata as a real cluster has it: managed fields, owners,
// finalizers and other tools' annotations beside kovs's.
func noisyMeta(ns, name string, labels, kovs map[string]string) metav1.ObjectMeta {
	ann := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"big":"json"}`, "example.com/x": "y"}
	for k, v := range kovs {
		ann[k] = v
	}
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: "7",
		Labels: labels, Annotations: ann, Finalizers: []string{"example.com/f"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}
}

func noisyPod(ns, name, node string, labels map[string]string, ports []corev1.ContainerPort, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: noisyMeta(ns, name, labels, nil), Spec: corev1.PodSpec{
		NodeName: node, SchedulerName: "default-scheduler", ServiceAccountName: "sa",
		Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
		Volumes:     []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox",
			Ports: []corev1.ContainerPort{{Name: "init-port", ContainerPort: 9}}}},
		Containers: []corev1.Container{
			{Name: "sidecar", Image: "envoy", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
			{Name: "main", Image: "app", Ports: ports, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
		},
	}, Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "192.168.0.1",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true, Image: "app"}}}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func noisyNode(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: noisyMeta("", name, map[string]string{"kubernetes.io/hostname": name}, nil),
		Spec: corev1.NodeSpec{ProviderID: "p://" + name, Taints: []corev1.Taint{{Key: "t", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"app@sha256:abc"}, SizeBytes: 1 << 20}},
			Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		}}
}

func trimmed[T runtime.Object](t *testing.T, objs []T) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		got, err := Transform(o.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = got.(T)
	}
	return out
}

// policyFixture is a cluster whose policies depend on every field the compiler reads:
// labels of pods and namespaces, nodes, addresses from the status and from kovs's
// annotation, named ports of containers, host networking and finished pods.
func policyFixture(t *testing.T) ([]*corev1.Namespace, []*corev1.Pod, []*networkingv1.NetworkPolicy) {
	network, err := ipam.NewPodNetwork([]ipam.PodAddress{{Address: netip.MustParsePrefix("10.244.2.9/24"), Gateway: netip.MustParseAddr("10.244.2.1")}})
	if err != nil {
		t.Fatal(err)
	}
	network.UID = "uid-a-annotated"
	record, err := network.Annotation()
	if err != nil {
		t.Fatal(err)
	}
	namespaces := []*corev1.Namespace{
		{ObjectMeta: noisyMeta("", "a", map[string]string{"team": "x"}, nil), Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}},
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		{ObjectMeta: noisyMeta("", "b", map[string]string{"team": "y"}, nil)},
	}
	http := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090}}
	hostNet := noisyPod("a", "host", "n1", map[string]string{"app": "web"}, http, "192.168.0.1")
	hostNet.Spec.HostNetwork = true
	done := noisyPod("a", "done", "n1", map[string]string{"app": "web"}, http, "10.244.1.7")
	done.Status.Phase = corev1.PodSucceeded
	annotated := noisyPod("a", "annotated", "n2", map[string]string{"app": "web"},
		[]corev1.ContainerPort{{Name: "http", ContainerPort: 8081, Protocol: corev1.ProtocolTCP}}, "10.244.2.9")
	annotated.Annotations[ipam.PodNetworkAnnotationKey] = record // a stale record of the old release: never read
	pods := []*corev1.Pod{
		noisyPod("a", "web-1", "n1", map[string]string{"app": "web"}, http, "10.244.1.5"),
		noisyPod("a", "web-2", "n2", map[string]string{"app": "web"}, []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}, "10.244.2.5", "fd00::5"),
		noisyPod("b", "client", "n1", map[string]string{"app": "client"}, nil, "10.244.1.6"),
		noisyPod("a", "db", "n2", map[string]string{"app": "db"}, []corev1.ContainerPort{{Name: "sql", ContainerPort: 5432}}, "10.244.2.6"),
		hostNet, done, annotated,
	}
	named := intstr.FromString("http")
	policies := []*networkingv1.NetworkPolicy{
		{ObjectMeta: noisyMeta("a", "web", nil, map[string]string{"kovs.io/realization": "1/2 nodes, generation 3"}),
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &named}},
				}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			}},
		{ObjectMeta: noisyMeta("b", "client-egress", nil, nil), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &named}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		}},
	}
	return namespaces, pods, policies
}

// TestTrimmedObjectsCompileIdentically compiles the fixture from the objects as the API
// has them and as the trimmed cache holds them: every node's share must be the same.
func TestTrimmedObjectsCompileIdentically(t *testing.T) {
	namespaces, pods, policies := policyFixture(t)
	want := networkpolicy.Compile(namespaces, pods, policies)
	got := networkpolicy.Compile(trimmed(t, namespaces), trimmed(t, pods), trimmed(t, policies))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("shares from trimmed objects:\n%+v\nwant (from the objects as they are):\n%+v", got, want)
	}
	// The fixture must exercise what trimming could break: a named port resolved from a
	// container, and the address from kovs's annotation.
	var ports, annotated bool
	for _, share := range want {
		for _, r := range share.Rules {
			ports = ports || len(r.Ports) > 0 && r.Ports[0].Port == 8081
		}
		for _, s := range share.AppliedToSets {
			for _, p := range s.Pods {
				annotated = annotated || p.Name == "annotated" && len(p.IPs) == 1 && p.IPs[0] == netip.MustParseAddr("10.244.2.9")
			}
		}
	}
	if !ports || !annotated {
		t.Fatalf("fixture does not exercise named ports (%v) or the address annotation (%v): %+v", ports, annotated, want)
	}
}

// TestTrimmedObjectsAllocateIdentically runs the node subnet reconciler, then a
// restart's Restore, over listers of the objects as they are and as trimmed: the blocks
// recorded and the allocators' usage must be the same.
func TestTrimmedObjectsAllocateIdentically(t *testing.T) {
	_, pods, _ := policyFixture(t)
	nodes := []*corev1.Node{noisyNode("n1", "192.168.0.1"), noisyNode("n2", "192.168.0.2")}
	wantRecords, wantUsage, wantRestored := allocate(t, nodes, pods, false)
	gotRecords, gotUsage, gotRestored := allocate(t, nodes, pods, true)
	if !reflect.DeepEqual(gotRecords, wantRecords) {
		t.Errorf("records from trimmed objects:\n%v\nwant:\n%v", gotRecords, wantRecords)
	}
	if !reflect.DeepEqual(gotUsage, wantUsage) || !reflect.DeepEqual(gotRestored, wantRestored) {
		t.Errorf("usage from trimmed objects %+v (restored %+v), want %+v (restored %+v)", gotUsage, gotRestored, wantUsage, wantRestored)
	}
	if len(wantRecords) < 2 { // 2 nodes
		t.Fatalf("only %d records: the fixture allocates too little: %v", len(wantRecords), wantRecords)
	}
}

// allocate reconciles every node and pod over listers holding the objects (trimmed or
// not), with a fake API server holding them as they are; it returns the kovs
// annotations the reconcilers recorded, the allocator's usage, and the usage of a new
// allocator restored from what was recorded.
func allocate(t *testing.T, nodes []*corev1.Node, pods []*corev1.Pod, trim bool) (map[string]string, addresses.Usage, addresses.Usage) {
	ctx := context.Background()
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n.DeepCopy())
	}
	for _, p := range pods {
		objs = append(objs, p.DeepCopy())
	}
	client := fake.NewSimpleClientset(objs...)
	cfg := addresses.Config{ClusterCIDRs: []ipam.ClusterCIDR{
		{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockBits: 24}, {CIDR: netip.MustParsePrefix("fd00::/48"), BlockBits: 64}}}
	alloc, err := addresses.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodeLister, _ := listers(t, nodes, pods, trim)
	recorder := record.NewFakeRecorder(100)
	nr := &addresses.NodeReconciler{Alloc: alloc, Client: client, Nodes: nodeLister, Recorder: recorder}
	for _, n := range nodes {
		if err := nr.Reconcile(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
	}
	records := map[string]string{}
	var stored []*corev1.Node
	var storedPods []*corev1.Pod
	for _, n := range nodes {
		got, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, got)
		for k, v := range kovsAnnotations(got.Annotations) {
			records[n.Name+" "+k] = v
		}
	}
	for _, p := range pods {
		got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		storedPods = append(storedPods, got)
		for k, v := range kovsAnnotations(got.Annotations) {
			records[p.Namespace+"/"+p.Name+" "+k] = v
		}
	}
	restored, err := addresses.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodeLister, _ = listers(t, stored, storedPods, trim)
	if err := restored.Restore(nodeLister); err != nil {
		t.Fatal(err)
	}
	return records, alloc.Usage(), restored.Usage()
}

func listers(t *testing.T, nodes []*corev1.Node, pods []*corev1.Pod, trim bool) (corelisters.NodeLister, corelisters.PodLister) {
	if trim {
		nodes, pods = trimmed(t, nodes), trimmed(t, pods)
	}
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	podIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		_ = nodeIdx.Add(n)
	}
	for _, p := range pods {
		_ = podIdx.Add(p)
	}
	return corelisters.NewNodeLister(nodeIdx), corelisters.NewPodLister(podIdx)
}
