package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	// probeTimeout bounds one probe; a working Service answers in milliseconds.
	probeTimeout = 2 * time.Second
	// programTimeout bounds how long a new or changed Service or EndpointSlice may take to
	// show in the datapath.
	programTimeout = 30 * time.Second
	podTimeout     = 90 * time.Second
	// spreadProbes new connections reach every one of 3 backends unless the spread is
	// broken: a fair hash misses one of them with probability (2/3)^60, about 3e-11.
	spreadProbes = 60
)

// svcCluster is a sandbox with the standard fixture every item shares: in namespace
// kovs-<sandbox>-web, backends web-1, web-2, web-3 on node1..3 (label app=web) serving
// 8080/tcp (http), 8081/tcp (alt), 5353/udp (dns) and 9132/sctp (sctp); and one client
// pod per node in kovs-<sandbox>-clients. Each item makes its own Services (and pods,
// when it needs others) in its own namespace.
type svcCluster struct {
	s       *framework.Sandbox
	webNS   string
	web     []*corev1.Pod
	clients map[string]*corev1.Pod // by node
}

// webPorts are the standard backends' container ports.
var webPorts = []corev1.ContainerPort{
	{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
	{Name: "alt", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
	{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
	{Name: "sctp", ContainerPort: 9132, Protocol: corev1.ProtocolSCTP},
}

var nodeNames = []string{"node1", "node2", "node3"}

func newSvcCluster(t *testing.T, family string) *svcCluster {
	env := framework.Require(t)
	s := framework.Up(t, env, "--nodes", "3", "--ip-family", family)
	c := &svcCluster{s: s, clients: map[string]*corev1.Pod{}}
	c.webNS = c.namespace(t, "web")
	clientNS := c.namespace(t, "clients")
	var specs []framework.PodSpec
	for i, node := range nodeNames {
		specs = append(specs, framework.PodSpec{Namespace: c.webNS, Name: fmt.Sprintf("web-%d", i+1), Node: node,
			Labels: map[string]string{"app": "web"}, Ports: webPorts})
		specs = append(specs, framework.PodSpec{Namespace: clientNS, Name: "client-" + node, Node: node,
			Labels: map[string]string{"role": "client"}})
	}
	for _, p := range c.createPods(t, specs...) {
		if p.Namespace == clientNS {
			c.clients[p.Spec.NodeName] = p
		} else {
			c.web = append(c.web, p)
		}
	}
	return c
}

// namespace creates kovs-<sandbox>-<item>, deleted when the test ends.
func (c *svcCluster) namespace(t *testing.T, item string) string {
	name := strings.ToLower("kovs-" + c.s.Layout.Name + "-" + item)
	c.s.EnsureNamespace(t, name, nil)
	t.Cleanup(func() {
		err := c.s.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	return name
}

// createPods creates the pods and waits until all run.
func (c *svcCluster) createPods(t *testing.T, specs ...framework.PodSpec) []*corev1.Pod {
	t.Helper()
	for _, p := range specs {
		c.s.CreatePod(t, p)
	}
	var pods []*corev1.Pod
	for _, p := range specs {
		pods = append(pods, c.s.WaitRunning(t, p.Namespace, p.Name, podTimeout))
	}
	return pods
}

// client is the client pod on node as a probe client.
func (c *svcCluster) client(node string) framework.Client {
	return c.s.PodClient(c.clients[node])
}

// svcPort is a Service port: name, port, target (a number or a container port name).
func svcPort(name string, port int32, target intstr.IntOrString, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: proto}
}

// service creates a Service; mutate (optional) adjusts it before the Create.
func (c *svcCluster) service(t *testing.T, ns, name string, selector map[string]string, ports []corev1.ServicePort,
	mutate func(*corev1.Service)) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
	if mutate != nil {
		mutate(svc)
	}
	return c.s.CreateService(t, svc)
}

// webService is a ClusterIP Service in the web namespace selecting the three backends.
func (c *svcCluster) webService(t *testing.T, name string, mutate func(*corev1.Service), ports ...corev1.ServicePort) *corev1.Service {
	t.Helper()
	svc := c.service(t, c.webNS, name, map[string]string{"app": "web"}, ports, mutate)
	c.s.WaitEndpoints(t, c.webNS, name, podNames(c.web), programTimeout)
	return svc
}

// waitAnswered probes until a responder answers from client to addr:port and returns
// that answer: the Service is programmed. It fails the test naming what is missing.
func (c *svcCluster) waitAnswered(t *testing.T, from framework.Client, addr netip.Addr, port, what string) responder.Result {
	t.Helper()
	deadline := time.Now().Add(programTimeout)
	for {
		r := c.s.ProbeFrom(from, addr, port, probeTimeout)
		if r.Connected && r.Reply != nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s from %s never answered within %s; last probe: %s", what,
				target(addr, port), from.Name, programTimeout, framework.Describe(r))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// target is "10.96.0.10:80/tcp", for messages.
func target(addr netip.Addr, port string) string {
	p, err := responder.ParsePort(port)
	if err != nil {
		return addr.String() + ":" + port
	}
	return responder.Target{Addr: addr, Port: p}.String()
}

// port is "80/tcp" for a Service or node port.
func port(n int32, proto corev1.Protocol) string {
	return fmt.Sprintf("%d/%s", n, strings.ToLower(string(proto)))
}

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func podKeys(pods ...*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// addrOf is the client's address of addr's family.
func addrOf(c framework.Client, like netip.Addr) netip.Addr {
	for _, a := range c.Addrs {
		if a.Is4() == like.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

// onlyFrom checks that every probe was answered, and only by the given responders.
func onlyFrom(a framework.Answers, allowed ...string) error {
	ok := map[string]bool{}
	for _, id := range allowed {
		ok[id] = true
	}
	if a.Unanswered() > 0 {
		return fmt.Errorf("%d probes unanswered: %s", a.Unanswered(), a)
	}
	for _, id := range a.Identities() {
		if !ok[id] {
			return fmt.Errorf("answered by %s, which must get no connections: %s", id, a)
		}
	}
	return nil
}

// allOf checks that every probe was answered and each given responder answered some.
func allOf(a framework.Answers, want ...string) error {
	if err := onlyFrom(a, want...); err != nil {
		return err
	}
	for _, id := range want {
		if a.ByIdentity[id] == 0 {
			return fmt.Errorf("backend %s got none of %d new connections: %s", id, len(a.Results), a)
		}
	}
	return nil
}

// nodePort is the node port the API allocated for the Service port named name.
func nodePort(t *testing.T, svc *corev1.Service, name string) int32 {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			if p.NodePort == 0 {
				t.Fatalf("service %s/%s port %s has no nodePort", svc.Namespace, svc.Name, name)
			}
			return p.NodePort
		}
	}
	t.Fatalf("service %s/%s has no port %s", svc.Namespace, svc.Name, name)
	return 0
}
