// Package realnode_test runs kovs the way an operator does: real kubelets, containerd and
// runc on every node, images built on the machine, kovs installed with `kubectl apply -k`
// of dist/, and every check made from inside real containers (agnhost) with kubectl exec.
package realnode_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const ns = "realnode"

// TestRealNodes is the real-node smoke of `make test`: install from dist/ (done by up) of
// the previous release and the upgrade to this one (upUpgraded), pods of a Deployment on
// every node, the network model's guarantees between them, a NetworkPolicy, a ClusterIP
// Service, the ovs image, install-cni during a CNI ADD, a hung kovs-controller leader,
// pods starting while kovs-controller is down, and `kubectl delete -k` leaving the nodes
// clean.
func TestRealNodes(t *testing.T) {
	env := framework.Require(t)
	s := upUpgraded(t, env)
	s.EnsureNamespace(t, ns, nil)
	s.Apply(webDeployment)
	kubectlOK(t, s, "-n", ns, "rollout", "status", "deployment/web", "--timeout=180s")
	s.Apply(hostWebPod)
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod/host-web", "--timeout=120s")
	web := podsOf(t, s, ns, "app=web")
	if len(web) != 3 {
		t.Fatalf("web pods on %d nodes, want one on each of 3: %v", len(web), web)
	}

	t.Run("one kovs-controller replica leads", func(t *testing.T) { checkOneLeader(t, s) })
	t.Run("pods get kovs addresses and see them on eth0", func(t *testing.T) { checkAddresses(t, s, web) })
	t.Run("pod to pod across nodes without NAT", func(t *testing.T) { checkPodToPod(t, s, web) })
	t.Run("node to its pods and pods to nodes without NAT", func(t *testing.T) { checkNodeAndPods(t, s, web) })
	t.Run("NetworkPolicy", func(t *testing.T) { checkNetworkPolicy(t, s, web) })
	t.Run("ClusterIP Service", func(t *testing.T) { checkClusterIP(t, s, web) })
	t.Run("cluster DNS and the kubernetes Service", func(t *testing.T) { checkDNS(t, s) })
	t.Run("hostPort", func(t *testing.T) { checkHostPort(t, s, web) })
	t.Run("pod bandwidth annotations", func(t *testing.T) { checkBandwidth(t, s, web) })
	t.Run("OVS runs in the kovs-ovs DaemonSet", func(t *testing.T) { checkOVSDaemonSet(t, s) })
	t.Run("install-cni while a CNI ADD is in flight", func(t *testing.T) { checkInstallDuringAdd(t, s) })
	t.Run("kovs's ports are closed to pods", func(t *testing.T) { checkPortsClosedToPods(t, s) })
	t.Run("the agent's token is bound to its node", func(t *testing.T) { checkAgentTokenIsNodeBound(t, s) })
	t.Run("the leading kovs-controller hangs", func(t *testing.T) { checkControllerFailover(t, s, web) })
	t.Run("pods start while kovs-controller is down", func(t *testing.T) { checkControllerOutage(t, s, web) })
	t.Run("kubectl delete -k leaves the nodes clean", func(t *testing.T) { checkUninstall(t, s) })
}

// One agnhost netexec per node.
var webDeployment = netexecDeployment("web")

// netexecDeployment is a Deployment of one agnhost netexec per node (labels app=<name>).
func netexecDeployment(name string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  replicas: 3
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: ` + name + `}}}
      containers:
        - name: netexec
          image: ` + agnhost + `
          imagePullPolicy: IfNotPresent
          args: [netexec, --http-port=8080, --udp-port=8081]
          ports: [{containerPort: 8080}]
          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
`
}

// A netexec on node1's host network: what pods reach at a node address.
var hostWebPod = `apiVersion: v1
kind: Pod
metadata: {name: host-web, namespace: ` + ns + `}
spec:
  nodeName: node1
  hostNetwork: true
  containers:
    - name: netexec
      image: ` + agnhost + `
      imagePullPolicy: IfNotPresent
      args: [netexec, --http-port=8080, --udp-port=8081]
`

// checkAddresses: every pod's address is in its node's kovs block (kovs allocated it, not
// another plugin), and is the address the pod sees on its own eth0 (guarantee 4).
// checkOneLeader: both controller replicas run, and for five seconds exactly one pod
// carries the leader label and the Lease names that pod (the replicas share the
// machine's hostname here, as hosts can: hostname_pid would be one identity for both).
func checkOneLeader(t *testing.T, s *framework.Sandbox) {
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		pods, err := s.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=kovs-controller"})
		if err != nil {
			t.Fatal(err)
		}
		var leaders []string
		for _, p := range pods.Items {
			if _, ok := p.Labels["kovs.io/leader"]; ok {
				leaders = append(leaders, p.Name)
			}
		}
		if len(pods.Items) != 2 || len(leaders) != 1 {
			t.Fatalf("%d kovs-controller pods, leaders %v: want 2 pods and one leader", len(pods.Items), leaders)
		}
		lease, err := s.Client.CoordinationV1().Leases("kube-system").Get(ctx, "kovs-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := lease.Spec.HolderIdentity; h == nil || !strings.HasPrefix(*h, leaders[0]+"_") {
			t.Fatalf("Lease kube-system/kovs-controller held by %v, the labelled leader is %s", h, leaders[0])
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func checkAddresses(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	for node, p := range web {
		n, err := s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		blocks := n.Annotations["kovs.io/node-subnets"]
		out, err := execIn(s, ns, p.Name, "ip", "-o", "addr", "show", "dev", "eth0")
		if err != nil {
			t.Fatalf("%s: ip addr: %v\n%s", p.Name, err, out)
		}
		for _, ip := range framework.PodIPs(&p) {
			if !inAnyBlock(ip, blocks) {
				t.Errorf("pod %s on %s has %s, outside the node's kovs blocks %s", p.Name, node, ip, blocks)
			}
			if !strings.Contains(out, " "+ip.String()+"/") {
				t.Errorf("pod %s: status IP %s is not on its eth0:\n%s", p.Name, ip, out)
			}
		}
	}
}

// checkPodToPod: every pod reaches every pod on the other nodes, and the receiver sees the
// sender's own address (guarantee 2).
func checkPodToPod(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	for from, src := range web {
		for to, dst := range web {
			if from == to {
				continue
			}
			seen, err := clientIP(s, ns, src.Name, framework.PodIPs(&dst)[0])
			if err != nil {
				t.Errorf("%s -> %s: %v", from, to, err)
				continue
			}
			if want := framework.PodIPs(&src)[0]; seen != want {
				t.Errorf("%s (%s) -> %s: receiver saw source %s, want the pod's own address", from, want, to, seen)
			}
		}
	}
}

// checkNodeAndPods: node1 reaches its pod and the pod sees one of node1's own addresses;
// every pod reaches node1's host network and is seen with its own address (guarantee 3).
func checkNodeAndPods(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	node1, err := s.Client.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostAddrs, err := execIn(s, ns, "host-web", "ip", "-o", "addr")
	if err != nil {
		t.Fatal(err)
	}
	local := web["node1"]
	seen, err := clientIP(s, ns, "host-web", framework.PodIPs(&local)[0])
	if err != nil {
		t.Fatalf("node1 -> its pod: %v", err)
	}
	if !strings.Contains(hostAddrs, " "+seen.String()+"/") {
		t.Errorf("node1 -> its pod: the pod saw %s, which is none of node1's addresses:\n%s", seen, hostAddrs)
	}
	nodeIP := netip.MustParseAddr(internalIP(node1))
	for node, p := range web {
		seen, err := clientIP(s, ns, p.Name, nodeIP)
		if err != nil {
			t.Errorf("pod on %s -> node1 %s: %v", node, nodeIP, err)
			continue
		}
		if want := framework.PodIPs(&p)[0]; seen != want {
			t.Errorf("pod on %s -> node1: node saw %s, want the pod's own %s", node, seen, want)
		}
	}
}

// checkNetworkPolicy: web pods admit only clients labelled access=yes; a client without
// the label is dropped, on every node, once the policy is realized, in three rounds.
func checkNetworkPolicy(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	for _, c := range []struct{ name, access string }{{"client-yes", "yes"}, {"client-no", "no"}} {
		s.Apply(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {access: %q}}
spec:
  nodeName: node2
  containers: [{name: c, image: %s, imagePullPolicy: IfNotPresent, args: [pause]}]
`, c.name, ns, c.access, agnhost))
	}
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod/client-yes", "pod/client-no", "--timeout=120s")
	for _, c := range []string{"client-yes", "client-no"} {
		for node, p := range web {
			if v, err := connect(s, ns, c, framework.PodIPs(&p)[0], 8080); err != nil || v != "CONNECTED" {
				t.Fatalf("before the policy, %s -> web on %s: %s %v", c, node, v, err)
			}
		}
	}
	s.Apply(webFromAccess)
	waitRealized(t, s, ns, "web-from-access")
	for round := 1; round <= 3; round++ {
		checkWebFromAccess(t, s, web, fmt.Sprintf("round %d", round), "client-yes")
	}
	kubectlOK(t, s, "-n", ns, "delete", "networkpolicy", "web-from-access")
}

// webFromAccess isolates the web pods: only pods labelled access=yes reach them, on 8080.
const webFromAccess = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-access, namespace: ` + ns + `}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {access: "yes"}}}]
      ports: [{port: 8080, protocol: TCP}]
`

// checkWebFromAccess: with web-from-access in force, the allowed clients reach web on
// every node and client-no does not, denied on evidence (web's deny flow on its node
// counted the attempt).
func checkWebFromAccess(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod, what string, allowed ...string) {
	t.Helper()
	for node, p := range web {
		ip := framework.PodIPs(&p)[0]
		for _, c := range allowed {
			if v, err := connect(s, ns, c, ip, 8080); err != nil || v != "CONNECTED" {
				t.Errorf("%s: allowed %s -> web on %s: %s %v", what, c, node, v, err)
			}
		}
		deny := nodeDenyPackets(s, podEnd{name: p.Name, namespace: ns, node: node})
		var v string
		var err error
		probe := func() responder.Result {
			v, err = connect(s, ns, "client-no", ip, 8080)
			return responder.Result{Connected: v == "CONNECTED", TimedOut: err == nil && v == "TIMEOUT"}
		}
		_, denied, replaced, why := framework.ProbeDenied(deny, probe)
		if replaced { // the deny flow was installed during the probe: no evidence either way
			t.Logf("%s: web on %s: its deny flow was replaced during the probe; probing again", what, node)
			_, denied, _, why = framework.ProbeDenied(deny, probe)
		}
		switch {
		case err != nil || v != "TIMEOUT":
			t.Errorf("%s: denied client -> web on %s: %s %v, want TIMEOUT (dropped)", what, node, v, err)
		case !denied:
			t.Errorf("%s: denied client -> web on %s timed out, but not on evidence: %s", what, node, why)
		}
	}
}

// checkClusterIP: a ClusterIP Service in front of the web pods answers from a pod, and
// spreads over every backend.
func checkClusterIP(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	s.Apply(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: ` + ns + `}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`)
	svc, err := s.Client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range web {
		want[p.Name] = true
	}
	seen := map[string]bool{}
	framework.Eventually(t, 60*time.Second, "the ClusterIP to reach every web pod", func() error {
		out, err := execIn(s, ns, "client-no", "curl", "-sS", "--max-time", "3", "http://"+svc.Spec.ClusterIP+"/hostname")
		if err != nil {
			return fmt.Errorf("curl %s: %v: %s", svc.Spec.ClusterIP, err, out)
		}
		name := strings.TrimSpace(out)
		if !want[name] {
			return fmt.Errorf("the ClusterIP answered as %q, which is no web pod", name)
		}
		seen[name] = true
		if len(seen) < len(want) {
			return fmt.Errorf("reached %d of %d backends so far", len(seen), len(want))
		}
		return nil
	})
}

func inAnyBlock(ip netip.Addr, blocks string) bool {
	for _, f := range strings.FieldsFunc(blocks, func(r rune) bool { return strings.ContainsRune(`[]", `, r) }) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}

// checkDNS: a pod resolves a Service's name through the cluster DNS (CoreDNS, itself a pod
// reaching kube-apiserver through the kubernetes Service) to its ClusterIP, and reaches
// kube-apiserver through that Service.
func checkDNS(t *testing.T, s *framework.Sandbox) {
	svc, err := s.Client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := "web." + ns + ".svc.cluster.local"
	framework.Eventually(t, 60*time.Second, name+" to resolve to "+svc.Spec.ClusterIP, func() error {
		out, err := execIn(s, ns, "client-no", "dig", "+short", "+time=2", "+tries=1", name)
		if err != nil {
			return fmt.Errorf("dig %s: %v: %s", name, err, out)
		}
		if strings.TrimSpace(out) != svc.Spec.ClusterIP {
			return fmt.Errorf("dig %s answered %q", name, out)
		}
		return nil
	})
	out, err := execIn(s, ns, "client-no", "curl", "-sk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "https://kubernetes.default.svc/healthz")
	if err != nil || strings.TrimSpace(out) != "401" && strings.TrimSpace(out) != "200" && strings.TrimSpace(out) != "403" {
		t.Errorf("a pod -> https://kubernetes.default.svc/healthz: %v %q (want an HTTP answer from kube-apiserver)", err, out)
	}
}

// checkHostPort: a pod's hostPort answers at its node's address, from another node's
// host network and from a pod on another node (kovs-cni runs portmap for it).
func checkHostPort(t *testing.T, s *framework.Sandbox, web map[string]corev1.Pod) {
	s.Apply(`apiVersion: v1
kind: Pod
metadata: {name: hostport, namespace: ` + ns + `}
spec:
  nodeName: node2
  containers:
    - name: netexec
      image: ` + agnhost + `
      imagePullPolicy: IfNotPresent
      args: [netexec, --http-port=8080]
      ports: [{containerPort: 8080, hostPort: 8088, protocol: TCP}]
      readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
`)
	kubectlOK(t, s, "-n", ns, "wait", "--for=condition=Ready", "pod/hostport", "--timeout=120s")
	node2, err := s.Client.CoreV1().Nodes().Get(context.Background(), "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + internalIP(node2) + ":8088/hostname"
	for _, from := range []string{"host-web", web["node3"].Name} {
		out, err := execIn(s, ns, from, "curl", "-sS", "--max-time", "5", url)
		if err != nil || strings.TrimSpace(out) != "hostport" {
			t.Errorf("%s -> %s: %v %q, want the hostport pod", from, url, err, out)
		}
	}
}
