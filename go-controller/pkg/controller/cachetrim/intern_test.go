package cachetrim

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/randfill"
)

// same reports whether a and b are the same map (not only equal ones).
func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func labelledPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}}
}

func transformPod(t *testing.T, tr *Trimmer, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := tr.Transform(p)
	if err != nil {
		t.Fatal(err)
	}
	return got.(*corev1.Pod)
}

// TestTrimmerSharesEqualLabelSets: pods with equal labels end up with one map, pods with
// different labels (a different value, a key more, keys that would run together without
// the length prefixes) with their own, and every pod keeps exactly its labels.
func TestTrimmerSharesEqualLabelSets(t *testing.T) {
	tr := NewTrimmer(0)
	a := transformPod(t, tr, labelledPod("a", map[string]string{"app": "web", "tier": "front"}))
	b := transformPod(t, tr, labelledPod("b", map[string]string{"tier": "front", "app": "web"}))
	if !same(a.Labels, b.Labels) {
		t.Fatal("two pods with the same labels keep two maps")
	}
	others := []map[string]string{
		{"app": "web", "tier": "back"},
		{"app": "web", "tier": "front", "x": ""},
		{"app": "web"},
		{"app": "webtier", "": "front"},
		{"ap": "pweb", "tier": "front"},
	}
	for i, labels := range others {
		want := maps.Clone(labels)
		got := transformPod(t, tr, labelledPod(fmt.Sprint("o", i), labels))
		if same(got.Labels, a.Labels) || !maps.Equal(got.Labels, want) {
			t.Errorf("pod labelled %v: got labels %v (shared with %v: %v)", want, got.Labels, a.Labels, same(got.Labels, a.Labels))
		}
	}
	if want := map[string]string{"app": "web", "tier": "front"}; !maps.Equal(a.Labels, want) {
		t.Fatalf("shared labels = %v, want %v", a.Labels, want)
	}
	if p := transformPod(t, tr, labelledPod("none", nil)); p.Labels != nil {
		t.Fatalf("a pod without labels got %v", p.Labels)
	}
	again := transformPod(t, tr, a)
	if !same(again.Labels, b.Labels) {
		t.Fatal("transforming a pod again gave it another map")
	}
}

// TestTrimmerSharesPolicySelectors: the matchLabels of a policy's pod selector and of its
// peers' pod and namespace selectors share the map of equal pod labels; the rest of the
// policy is what Transform leaves.
func TestTrimmerSharesPolicySelectors(t *testing.T) {
	tr := NewTrimmer(0)
	pod := transformPod(t, tr, labelledPod("p", map[string]string{"app": "db"}))
	sel := func() *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "ns"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *sel(),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(), NamespaceSelector: sel()}}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel()}, {IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}}},
		},
	}
	want := np.DeepCopy()
	got, err := tr.Transform(np)
	if err != nil {
		t.Fatal(err)
	}
	spec := got.(*networkingv1.NetworkPolicy).Spec
	for name, m := range map[string]map[string]string{
		"podSelector": spec.PodSelector.MatchLabels, "ingress podSelector": spec.Ingress[0].From[0].PodSelector.MatchLabels,
		"ingress namespaceSelector": spec.Ingress[0].From[0].NamespaceSelector.MatchLabels,
		"egress podSelector":        spec.Egress[0].To[0].PodSelector.MatchLabels,
	} {
		if !same(m, pod.Labels) {
			t.Errorf("%s: not shared with the pod's equal labels", name)
		}
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("policy changed by the trimmer: %+v, want %+v", got, want)
	}
}

// TestTrimmerKeepsWhatTransformKeeps: the trimmer's result equals the package
// Transform's on objects with every field filled (sharing changes no content).
func TestTrimmerKeepsWhatTransformKeeps(t *testing.T) {
	f := randfill.NewWithSeed(2).NilChance(0.2).NumElements(1, 3)
	tr := NewTrimmer(0)
	for _, newObj := range []func() any{
		func() any { return &corev1.Pod{} }, func() any { return &corev1.Node{} },
		func() any { return &corev1.Namespace{} }, func() any { return &networkingv1.NetworkPolicy{} },
	} {
		for range 50 {
			obj := newObj()
			f.Fill(obj)
			want, _ := Transform(deepCopy(obj))
			got, err := tr.Transform(obj)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Fatalf("%T: trimmer gave %+v, Transform %+v", obj, got, want)
			}
		}
	}
}

// TestTrimmerForgetsWhenFull: a trimmer never remembers more sets than its bound, and
// still shares the sets it meets after forgetting.
func TestTrimmerForgetsWhenFull(t *testing.T) {
	tr := NewTrimmer(4)
	for i := range 10 {
		transformPod(t, tr, labelledPod(fmt.Sprint("p", i), map[string]string{"i": fmt.Sprint(i)}))
		if n := len(tr.labels.sets); n > 4 {
			t.Fatalf("after %d sets the trimmer remembers %d, bound 4", i+1, n)
		}
	}
	a := transformPod(t, tr, labelledPod("a", map[string]string{"app": "x"}))
	b := transformPod(t, tr, labelledPod("b", map[string]string{"app": "x"}))
	if !same(a.Labels, b.Labels) {
		t.Fatal("after forgetting, equal sets are no longer shared")
	}
}

// TestTrimmerConcurrent: the factory's informers transform at the same time (run with
// -race).
func TestTrimmerConcurrent(t *testing.T) {
	tr := NewTrimmer(8)
	var wg sync.WaitGroup
	results := make([][]*corev1.Pod, 4)
	for w := range results {
		wg.Go(func() {
			for i := range 200 {
				p, _ := tr.Transform(labelledPod(fmt.Sprint(w, "-", i), map[string]string{"app": fmt.Sprint(i % 3)}))
				results[w] = append(results[w], p.(*corev1.Pod))
			}
		})
	}
	wg.Wait()
	for w := range results {
		for i, p := range results[w] {
			if want := fmt.Sprint(i % 3); len(p.Labels) != 1 || p.Labels["app"] != want {
				t.Fatalf("pod %d-%d: labels %v, want app=%s", w, i, p.Labels, want)
			}
		}
	}
}

// TestFactorySharesLabelSets: the controller's factory installs the trimmer, so two
// cached pods with equal labels share one map.
func TestFactorySharesLabelSets(t *testing.T) {
	client := fake.NewClientset(labelledPod("a", map[string]string{"app": "web"}), labelledPod("b", map[string]string{"app": "web"}))
	factory := NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	a, errA := pods.Lister().Pods("ns").Get("a")
	b, errB := pods.Lister().Pods("ns").Get("b")
	if errA != nil || errB != nil {
		t.Fatalf("cached pods: %v, %v", errA, errB)
	}
	if !same(a.Labels, b.Labels) || a.Labels["app"] != "web" {
		t.Fatalf("cached pods' labels %v and %v are not one shared map", a.Labels, b.Labels)
	}
}

// BenchmarkTransformPod is the transform's cost per pod, with and without sharing its
// labels (the informers run it once per object they take).
func BenchmarkTransformPod(b *testing.B) {
	labels := map[string]string{"app": "web", "pod-template-hash": "5d8f9c7b6"}
	for _, c := range []struct {
		name string
		tf   func(any) (any, error)
	}{{"trim", Transform}, {"trim-and-share", NewTrimmer(0).Transform}} {
		b.Run(c.name, func(b *testing.B) {
			pods := make([]*corev1.Pod, b.N)
			for i := range pods {
				pods[i] = labelledPod(fmt.Sprint("p", i), maps.Clone(labels))
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := c.tf(pods[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
