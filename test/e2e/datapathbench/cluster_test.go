package datapathbench_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	benchNamespace = "dpbench"
	benchPolicies  = 100
	benchServices  = 100
	clientLabel    = "dp-client"
	serverLabel    = "dp-server"
	// deniedPort is a port no policy allows: the check that the policies isolate the pods.
	deniedPort     = 5299
	podTimeout     = 60 * time.Second
	realizeTimeout = 120 * time.Second
	createWorkers  = 8
)

// kovsSide is the measured pods: a client on node1 and a server on node2, both selected by
// the benchmark's NetworkPolicies, the server the endpoint of its Services.
type kovsSide struct {
	client, server     *corev1.Pod
	clientNS, serverNS string
	serverAddr         netip.Addr
	mtu                int
	txOff              bool // the client pod's TX checksum offload is off (the userspace datapath)
}

// setUpKovs creates the pods, the policies and the Services, and waits until every policy
// is realized on the nodes it concerns and every Service has its group on both nodes.
func setUpKovs(b *testing.B, s *framework.Sandbox) *kovsSide {
	s.EnsureNamespace(b, benchNamespace, nil)
	s.CreatePod(b, framework.PodSpec{Namespace: benchNamespace, Name: "client", Node: "node1",
		Labels: map[string]string{"app": clientLabel}})
	s.CreatePod(b, framework.PodSpec{Namespace: benchNamespace, Name: "server", Node: "node2",
		Labels: map[string]string{"app": serverLabel}})
	k := &kovsSide{
		client: s.WaitRunning(b, benchNamespace, "client", podTimeout),
		server: s.WaitRunning(b, benchNamespace, "server", podTimeout),
	}
	start := time.Now()
	createAll(b, benchPolicies, func(i int) error {
		_, err := s.Client.NetworkingV1().NetworkPolicies(benchNamespace).Create(context.Background(), benchPolicy(i), metav1.CreateOptions{})
		return ignoreExists(err)
	})
	createAll(b, benchServices, func(i int) error {
		_, err := s.Client.CoreV1().Services(benchNamespace).Create(context.Background(), benchService(i), metav1.CreateOptions{})
		return ignoreExists(err)
	})
	framework.Eventually(b, realizeTimeout, fmt.Sprintf("%d policies realized", benchPolicies), func() error { return policiesRealized(s) })
	for _, node := range []string{"node1", "node2"} {
		framework.Eventually(b, realizeTimeout, fmt.Sprintf("%d Service groups on %s", benchServices, node), func() error {
			if n := len(s.DumpGroups(b, node)); n < benchServices {
				return fmt.Errorf("%d groups", n)
			}
			return nil
		})
	}
	b.Logf("%d NetworkPolicies realized and %d Services installed after %s", benchPolicies, benchServices, time.Since(start).Round(time.Millisecond))
	k.clientNS, k.serverNS = s.NetNSPath(k.client), s.NetNSPath(k.server)
	k.serverAddr = framework.PodIPs(k.server)[0]
	var err error
	if k.mtu, k.txOff, err = podInterface(k.clientNS); err != nil {
		b.Fatal(err)
	}
	return k
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createAll runs create(0..n-1) on a few workers and fails the benchmark on the first error.
func createAll(b *testing.B, n int, create func(int) error) {
	b.Helper()
	if err := framework.ForEach(0, n, createWorkers, create); err != nil {
		b.Fatal(err)
	}
}

// benchPolicy is policy i: even ones isolate the server for ingress and allow the client
// (and an address block of their own) on the benchmark's two ports and one port of their
// own; odd ones do the same for the client's egress to the server. All of them select a
// measured pod, so every packet's policy lookups see all of them.
func benchPolicy(i int) *networkingv1.NetworkPolicy {
	tcp := func(port int) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt(port))}
	}
	ports := []networkingv1.NetworkPolicyPort{tcp(bulkPort), tcp(rrPort), tcp(7000 + i)}
	block := &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.%d.%d.0/24", 200+i%2, i)}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("dp-%03d", i)}}
	if i%2 == 0 {
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": serverLabel}}
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: ports, From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": clientLabel}}}, {IPBlock: block}}}}
		return np
	}
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": clientLabel}}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: ports, To: []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": serverLabel}}}, {IPBlock: block}}}}
	return np
}

// benchService is Service i: a ClusterIP port of its own, the server its endpoint.
func benchService(i int) *corev1.Service {
	port := int32(8000 + i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("dp-%03d", i)},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": serverLabel},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}}},
	}
}

// policiesRealized checks that every benchmark policy reads complete on the nodes it
// concerns, and concerns one.
func policiesRealized(s *framework.Sandbox) error {
	list, err := s.Client.NetworkingV1().NetworkPolicies(benchNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	done, last := 0, ""
	for _, np := range list.Items {
		value := np.Annotations[realization.AnnotationKey]
		if st, err := realization.ParseStatus(value); err == nil && st.Complete() && st.Concerned > 0 {
			done++
		} else {
			last = np.Name + ": " + value
		}
	}
	if done != benchPolicies {
		return fmt.Errorf("%d of %d policies (%d listed) realized; e.g. %q", done, benchPolicies, len(list.Items), last)
	}
	return nil
}

// podInterface reads the MTU of eth0 in the namespace at netnsPath, and whether its TX
// checksum offload is off.
func podInterface(netnsPath string) (mtu int, txOff bool, err error) {
	err = ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mtu = link.Attrs().MTU
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("eth0 in %s: %w", netnsPath, err)
	}
	out, err := execIn(netnsPath, "ethtool", "-k", "eth0")
	if err != nil {
		return 0, false, err
	}
	return mtu, strings.Contains(out, "tx-checksumming: off"), nil
}

// checkIsolated checks that the policies are in force: the server does not answer the
// client on a port none of them allows, while it listens there.
func checkIsolated(b *testing.B, k *kovsSide) {
	b.Helper()
	ln, err := listenIn(k.serverNS, deniedPort)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if conn, err := dialFrom(ctx, k.clientNS, k.serverAddr, deniedPort); err == nil {
		conn.Close()
		b.Fatalf("the client reached the server on %d/tcp, which no policy allows: the policies are not in force", deniedPort)
	}
}

// execIn runs a command in the named network namespace at netnsPath.
func execIn(netnsPath string, cmd ...string) (string, error) {
	args := append([]string{"netns", "exec", strings.TrimPrefix(netnsPath, "/run/netns/")}, cmd...)
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s in %s: %w: %s", strings.Join(cmd, " "), netnsPath, err, out)
	}
	return string(out), nil
}
