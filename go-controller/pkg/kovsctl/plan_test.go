package kovsctl

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestPlanFromFlags(t *testing.T) {
	req, err := ParsePlan("10.244.0.0/16,fd00:10:244::/48", "25", "10.96.0.0/12", "10.0.0.0/8", 110)
	if err != nil {
		t.Fatal(err)
	}
	rep := Plan(req)
	var out bytes.Buffer
	rep.Print(&out)
	for _, want := range []string{
		"IPv4: cluster CIDR 10.244.0.0/16, /25 node blocks", "node cap        512 nodes", "block holds     125 pods",
		"pods per node   110 (max pods binds)", "pod capacity    56,320", "IPv6: cluster CIDR fd00:10:244::/48, /64 node blocks",
		"OVERLAP: IPv4 cluster CIDR 10.244.0.0/16 overlaps node network 10.0.0.0/8",
		"OVERLAP: Service CIDR 10.96.0.0/12 overlaps node network 10.0.0.0/8",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if rep.OK() {
		t.Error("a plan with overlaps is OK")
	}
	for _, bad := range [][]string{{"", ""}, {"10.244.0.0/16", "x"}, {"10.244.0.0/16,10.245.0.0/16", ""}, {"10.244.0.0/16", "24,64"}, {"10.244.0.1/16", ""}} {
		if _, err := ParsePlan(bad[0], bad[1], "", "", 0); err == nil {
			t.Errorf("ParsePlan(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestLivePlanNamesNodesWhoseMaxPodsExceedTheirBlock(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kovs-config"},
		Data: map[string]string{"cluster-cidrs": "10.244.0.0/16", "ipv4-block-size": "25"}}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
	node := func(name, addr, block string, pods int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kovs.io/node-subnets": `{"ipv4":["` + block + `"]}`}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}},
				Capacity: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)}}}
	}
	client := fake.NewSimpleClientset(cm, sc, node("n1", "172.30.0.1", "10.244.0.0/25", 110), node("n2", "172.30.0.2", "10.244.0.128/25", 250))
	req, err := Access{Client: client}.LivePlan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rep := Plan(req)
	if len(rep.Oversized) != 1 || !strings.HasPrefix(rep.Oversized[0], "n2: max pods 250, block 10.244.0.128/25 holds 125") || len(rep.Overlaps) != 0 {
		t.Errorf("report %+v", rep)
	}
	if f := rep.Families[0]; f.Cluster.BlockBits != 25 || f.PodsPerNode != 125 || f.BoundBy != "block" {
		t.Errorf("family %+v", f)
	}
}
