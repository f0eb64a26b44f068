package cachetrim

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
)

// typeName is the key of a struct type in Kept: "core/v1.Pod".
func typeName(t reflect.Type) string { return keptKey(t.PkgPath(), t.Name()) }

// keptKey is Kept's key for type name of package pkgPath: the package path's last two
// elements and the name ("k8s.io/api/core/v1", "Pod" -> "core/v1.Pod").
func keptKey(pkgPath, name string) string {
	parts := strings.Split(pkgPath, "/")
	if len(parts) < 2 {
		return name
	}
	return parts[len(parts)-2] + "/" + parts[len(parts)-1] + "." + name
}

// TestTransformKeepsExactlyKept fills every field of each kind, transforms it and checks
// field by field that what Kept lists is kept as it was and everything else is dropped.
// A field added to Kept without the transform keeping it, or kept without being listed,
// fails here.
func TestTransformKeepsExactlyKept(t *testing.T) {
	kept := Kept()
	f := randfill.NewWithSeed(1).NilChance(0).NumElements(2, 3)
	for _, newObj := range []func() any{
		func() any { return &corev1.Pod{} }, func() any { return &corev1.Node{} },
		func() any { return &corev1.Namespace{} }, func() any { return &networkingv1.NetworkPolicy{} },
	} {
		for range 20 {
			obj := newObj()
			f.Fill(obj)
			v := reflect.ValueOf(obj).Elem()
			ann := v.FieldByName("Annotations")
			ann.SetMapIndex(reflect.ValueOf(AnnotationPrefix+"x"), reflect.ValueOf("kept"))
			ann.SetMapIndex(reflect.ValueOf(bandwidth.EgressAnnotation), reflect.ValueOf("10M"))
			orig := deepCopy(obj)
			got, err := Transform(obj)
			if err != nil {
				t.Fatal(err)
			}
			checkKept(t, kept, typeName(v.Type()), reflect.ValueOf(orig).Elem(), reflect.ValueOf(got).Elem())
			once := deepCopy(got)
			again, _ := Transform(got)
			if !equality.Semantic.DeepEqual(again, once) {
				t.Fatalf("%T: Transform is not idempotent", obj)
			}
		}
	}
	for typ := range kept {
		if !slices.Contains([]string{"meta/v1.ObjectMeta", "core/v1.Pod", "core/v1.PodSpec", "core/v1.Container",
			"core/v1.PodStatus", "core/v1.Node", "core/v1.NodeSpec", "core/v1.NodeStatus", "core/v1.Namespace",
			"core/v1.NamespaceSpec", "core/v1.NamespaceStatus", "networking/v1.NetworkPolicy"}, typ) {
			t.Errorf("Kept lists %s, which this test does not fill: add it to the test", typ)
		}
	}
}

func deepCopy(obj any) any {
	return obj.(runtime.Object).DeepCopyObject()
}

func checkKept(t *testing.T, kept map[string][]string, path string, orig, got reflect.Value) {
	t.Helper()
	fields, checked := kept[typeName(orig.Type())]
	if !checked {
		if !equality.Semantic.DeepEqual(orig.Interface(), got.Interface()) {
			t.Errorf("%s: changed, but %s is kept whole", path, typeName(orig.Type()))
		}
		return
	}
	for i := range orig.NumField() {
		name := orig.Type().Field(i).Name
		o, g := orig.Field(i), got.Field(i)
		switch {
		case !slices.Contains(fields, name):
			if !g.IsZero() {
				t.Errorf("%s.%s: kept, but Kept does not list it", path, name)
			}
		case name == "Annotations":
			for k, v := range o.Interface().(map[string]string) {
				gv, ok := g.Interface().(map[string]string)[k]
				if want := KeptAnnotation(k); ok != want || (ok && gv != v) {
					t.Errorf("%s.Annotations[%s]: kept %v, want %v", path, k, ok, want)
				}
			}
		case o.Kind() == reflect.Struct:
			checkKept(t, kept, path+"."+name, o, g)
		case o.Kind() == reflect.Slice && o.Type().Elem().Kind() == reflect.Struct && kept[typeName(o.Type().Elem())] != nil:
			// Containers: those that declare ports (randfill gives each some).
			if o.Len() != g.Len() {
				t.Errorf("%s.%s: %d elements kept of %d", path, name, g.Len(), o.Len())
				continue
			}
			for j := range o.Len() {
				checkKept(t, kept, path+"."+name, o.Index(j), g.Index(j))
			}
		default:
			if !equality.Semantic.DeepEqual(o.Interface(), g.Interface()) {
				t.Errorf("%s.%s: changed, but Kept lists it", path, name)
			}
		}
	}
}

func TestTransformDropsContainersWithoutPorts(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Image: "busybox"},
		{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}},
	}}}
	got, _ := Transform(p)
	want := []corev1.Container{{Name: "b", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	if c := got.(*corev1.Pod).Spec.Containers; !reflect.DeepEqual(c, want) {
		t.Fatalf("containers = %+v, want %+v", c, want)
	}
}

func TestTransformPassesOtherObjects(t *testing.T) {
	s := &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	if got, err := Transform(s); err != nil || got != any(s) || string(s.Data["k"]) != "v" {
		t.Fatalf("Transform(secret) = %v, %v; want it unchanged", got, err)
	}
}

// TestBandwidthAnnotationsReachTheWarnings: kovs-controller reports unusable bandwidth
// annotations from its cache, so the transform keeps them (and drops other tools' ones).
func TestBandwidthAnnotationsReachTheWarnings(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{
		bandwidth.IngressAnnotation: "10M", bandwidth.EgressAnnotation: "10Mbit", "example.com/other": "x"}}}
	got, _ := Transform(pod)
	ann := got.(*corev1.Pod).Annotations
	if len(ann) != 2 || ann[bandwidth.IngressAnnotation] != "10M" || ann[bandwidth.EgressAnnotation] != "10Mbit" {
		t.Fatalf("annotations after the transform: %v, want both bandwidth annotations and nothing else", ann)
	}
	if _, err := bandwidth.FromAnnotations(ann); err == nil {
		t.Fatal("the trimmed pod's unusable egress-bandwidth is no longer seen")
	}
}
