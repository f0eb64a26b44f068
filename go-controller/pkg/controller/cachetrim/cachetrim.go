// Package cachetrim keeps in kovs-controller's informer caches only the fields kovs reads.
//
// The controller's one shared informer factory caches every Pod, Node, Namespace and
// NetworkPolicy of the cluster; without trimming, those copies are most of the
// controller's heap (a Pod in a real cluster carries managedFields, volumes, env,
// tolerations, probes and a long status, and kovs reads a dozen fields of it). As
// kube-scheduler does, the factory's informers get a transform (Transform) that trims
// each object, before it is cached, to what some reader needs; and (Trimmer) the cached
// Pods with the same labels, and the NetworkPolicy selectors with the same matchLabels,
// share one map, as the replicas of a workload and the policies of a namespace template
// repeat the same few label sets.
//
// The readers of the shared factory are the pod address allocator and its restore
// (controller/addresses), the node subnet allocator and the address plan check, the
// policy compiler (controller/networkpolicy) and the realization status and tracker
// (controller/realization), and the agents' token verifier (a token bound to an agent's
// Pod or Node is checked against them: controller/policy.go). The fields each kind keeps are listed in Kept; a reader that
// needs one more must add it to both (the package's tests check that Transform keeps
// exactly Kept, and that the controller's packages select no field outside it). Updates
// that change only dropped fields still reach the informers' handlers (the resource
// version changes): handlers must compare the fields they read, as theirs do.
//
// Writes never start from a cached object: every kovs write to these kinds is a merge
// patch of its own fields, so a trimmed cache cannot erase anything on the server.
package cachetrim

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
)

// AnnotationPrefix is the prefix of kovs's own annotations, which are kept.
const AnnotationPrefix = "kovs.io/"

// KeptAnnotation reports whether an annotation is kept in the cache: kovs's own, and the pod
// bandwidth annotations kovs-controller checks to report unusable values
// (controller/addresses.BandwidthWarnings).
func KeptAnnotation(key string) bool {
	return strings.HasPrefix(key, AnnotationPrefix) || key == bandwidth.IngressAnnotation || key == bandwidth.EgressAnnotation
}

// NewSharedInformerFactory returns the controller's shared informer factory, whose
// informers cache objects trimmed by Transform, with equal label sets shared (Trimmer).
func NewSharedInformerFactory(client kubernetes.Interface, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(NewTrimmer(DefaultInternedSets).Transform))
}

// Transform trims, in place, the objects of the kinds kovs-controller reads to the fields
// listed in Kept and returns them; any other object is returned unchanged. As
// kube-scheduler's transform, it modifies its argument: an informer hands it an object
// it has just decoded and shares with nobody. Trimming in place allocates no new object
// (only a smaller annotations map when other tools' annotations are dropped), so the
// cache costs at most what the untrimmed objects would. It is idempotent (an informer
// may transform an object twice).
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		trimMeta(&o.ObjectMeta)
		o.Spec = corev1.PodSpec{NodeName: o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork, Containers: containerPorts(o.Spec.Containers),
			ServiceAccountName: o.Spec.ServiceAccountName}
		o.Status = corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs}
	case *corev1.Node:
		trimMeta(&o.ObjectMeta)
		o.Spec = corev1.NodeSpec{PodCIDR: o.Spec.PodCIDR, PodCIDRs: o.Spec.PodCIDRs}
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses, Conditions: o.Status.Conditions}
	case *corev1.Namespace:
		trimMeta(&o.ObjectMeta)
		o.Spec, o.Status = corev1.NamespaceSpec{}, corev1.NamespaceStatus{}
	case *networkingv1.NetworkPolicy:
		trimMeta(&o.ObjectMeta)
	}
	return obj, nil
}

// Kept returns the fields Transform keeps, per Go struct type (package-qualified name ->
// field names). A struct's field not listed is dropped (zero) in every cached object;
// the types below a listed field that is not itself in the map (ContainerPort, PodIP,
// NodeAddress, NodeCondition, NetworkPolicySpec and all under it) are kept whole.
func Kept() map[string][]string {
	meta := []string{"Name", "Namespace", "UID", "ResourceVersion", "Generation", "CreationTimestamp",
		"DeletionTimestamp", "Labels", "Annotations"} // Annotations: the keys KeptAnnotation keeps
	return map[string][]string{
		"meta/v1.ObjectMeta":          meta,
		"core/v1.Pod":                 {"TypeMeta", "ObjectMeta", "Spec", "Status"},
		"core/v1.PodSpec":             {"NodeName", "HostNetwork", "Containers", "ServiceAccountName"},
		"core/v1.Container":           {"Name", "Ports"},
		"core/v1.PodStatus":           {"Phase", "PodIP", "PodIPs"},
		"core/v1.Node":                {"TypeMeta", "ObjectMeta", "Spec", "Status"},
		"core/v1.NodeSpec":            {"PodCIDR", "PodCIDRs"},
		"core/v1.NodeStatus":          {"Addresses", "Conditions"},
		"core/v1.Namespace":           {"TypeMeta", "ObjectMeta"},
		"core/v1.NamespaceSpec":       {},
		"core/v1.NamespaceStatus":     {},
		"networking/v1.NetworkPolicy": {"TypeMeta", "ObjectMeta", "Spec"},
	}
}

// trimMeta keeps the identity, labels and kovs's annotations.
func trimMeta(m *metav1.ObjectMeta) {
	*m = metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		Labels: m.Labels, Annotations: kovsAnnotations(m.Annotations),
	}
}

// kovsAnnotations returns the annotations KeptAnnotation keeps: the map itself when it
// holds nothing else, nil when it holds none of them.
func kovsAnnotations(all map[string]string) map[string]string {
	n := 0
	for k := range all {
		if KeptAnnotation(k) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(all):
		return all
	}
	out := make(map[string]string, n)
	for k, v := range all {
		if KeptAnnotation(k) {
			out[k] = v
		}
	}
	return out
}

// containerPorts keeps, of the containers that declare ports, their names and ports
// (what named ports resolve against), in the slice's own array.
func containerPorts(containers []corev1.Container) []corev1.Container {
	out := containers[:0]
	for i := range containers {
		if c := containers[i]; len(c.Ports) > 0 {
			out = append(out, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	clear(containers[len(out):])
	if len(out) == 0 {
		return nil
	}
	return out
}
