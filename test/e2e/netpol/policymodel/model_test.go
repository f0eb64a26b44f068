package policymodel

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The cluster of these tests: namespace default (project=myproject is "myproject"'s
// label in the documentation's example; here namespace "myproject" carries it), pods on
// two nodes, a hostNetwork pod on node1.
func docCluster(t *testing.T, policies ...string) *Cluster {
	t.Helper()
	ns := func(name string, labels map[string]string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	pod := func(ns, name, node string, labels map[string]string, ips ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
				{Name: "redis", ContainerPort: 6379}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	c := &Cluster{
		Namespaces: []corev1.Namespace{ns("default", nil), ns("myproject", map[string]string{"project": "myproject"}), ns("bare", nil)},
		Pods: []corev1.Pod{
			pod("default", "db", "node1", map[string]string{"role": "db"}, "172.17.0.10", "fd00::10"),
			pod("default", "frontend", "node2", map[string]string{"role": "frontend"}, "172.17.1.20", "fd00::20"),
			pod("default", "other", "node2", map[string]string{"role": "other"}, "172.17.0.30", "fd00::30"),
			pod("myproject", "any", "node2", map[string]string{"role": "any"}, "172.17.1.40", "fd00::40"),
			pod("bare", "nolabels", "node2", nil, "10.0.0.5", "fd00::50"),
		},
	}
	host := pod("default", "host", "node1", map[string]string{"role": "frontend"}, "192.168.0.1", "fd00:192::1")
	host.Spec.HostNetwork = true
	remoteHost := pod("default", "host2", "node2", map[string]string{"role": "frontend"}, "192.168.0.2", "fd00:192::2")
	remoteHost.Spec.HostNetwork = true
	c.Pods = append(c.Pods, host, remoteHost)
	for _, doc := range policies {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
			t.Fatalf("policy: %v\n%s", err, doc)
		}
		c.Policies = append(c.Policies, np)
	}
	return c
}

// The example policy of the NetworkPolicy concept page.
const docExample = `
metadata: {name: test-network-policy, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress, Egress]
  ingress:
    - from:
        - ipBlock: {cidr: 172.17.0.0/16, except: [172.17.1.0/24]}
        - namespaceSelector: {matchLabels: {project: myproject}}
        - podSelector: {matchLabels: {role: frontend}}
      ports: [{protocol: TCP, port: 6379}]
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.0/24}}]
      ports: [{protocol: TCP, port: 5978}]
`

func tcp(from, to string, port int32) Connection {
	return Connection{From: from, To: to, Protocol: corev1.ProtocolTCP, Port: port}
}

func udp(from, to string, port int32) Connection {
	return Connection{From: from, To: to, Protocol: corev1.ProtocolUDP, Port: port}
}

func TestDocumentedSemantics(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []string
		conn     Connection
		want     bool
	}{
		{"no policy: everything allowed", nil, tcp("default/frontend", "default/db", 80), true},
		{"example: podSelector peer on the port", []string{docExample}, tcp("default/frontend", "default/db", 6379), true},
		{"example: other port denied", []string{docExample}, tcp("default/frontend", "default/db", 80), false},
		{"example: UDP on the port denied", []string{docExample}, udp("default/frontend", "default/db", 6379), false},
		{"example: namespaceSelector peer", []string{docExample}, tcp("myproject/any", "default/db", 6379), true},
		{"example: ipBlock peer (172.17.0.30)", []string{docExample}, tcp("default/other", "default/db", 6379), true},
		{"example: unselected pod not isolated", []string{docExample}, tcp("default/db", "default/other", 80), false},
		{"example: db's egress to 10.0.0.0/24 on 5978", []string{docExample}, tcp("default/db", "bare/nolabels", 5978), true},
		{"example: db's egress elsewhere denied", []string{docExample}, tcp("default/db", "default/frontend", 5978), false},
		{"example: IPv6 misses the IPv4 ipBlock", []string{docExample},
			Connection{From: "default/other", To: "default/db", Protocol: corev1.ProtocolTCP, Port: 6379, IPv6: true}, false},
		{"a pod reaches itself", []string{denyAll}, tcp("default/db", "default/db", 80), true},
		{"the node reaches its pods", []string{denyAll}, tcp("default/host", "default/db", 80), true},
		{"a pod reaches its node", []string{denyAll}, tcp("default/db", "default/host", 80), true},
		{"another node is denied", []string{denyAll}, tcp("default/host2", "default/db", 80), false},
		{"hostNetwork pods are not selected as targets", []string{denyAll}, tcp("default/frontend", "default/host2", 80), true},
		{"hostNetwork pods are not peers", []string{fromFrontend}, tcp("default/host2", "default/db", 80), false},
		{"policyTypes default: egress rules only still isolate ingress", []string{egressOnly}, tcp("default/other", "default/db", 80), false},
		{"policyTypes default: egress isolated by egress rules", []string{egressOnly}, tcp("default/db", "default/other", 80), false},
		{"policyTypes default: egress rule allows", []string{egressOnly}, tcp("default/db", "default/frontend", 80), true},
		{"NotIn holds for a pod without the key", []string{notIn}, tcp("bare/nolabels", "default/db", 80), true},
		{"NotIn fails for a listed value", []string{notIn}, tcp("default/frontend", "default/db", 80), false},
		{"DoesNotExist selects only pods without the key", []string{doesNotExist}, tcp("bare/nolabels", "default/db", 80), true},
		{"DoesNotExist rejects pods with the key", []string{doesNotExist}, tcp("default/other", "default/db", 80), false},
		{"namespace NotIn holds for a namespace without the key", []string{nsNotIn}, tcp("bare/nolabels", "default/db", 80), true},
		{"namespace NotIn: listed value", []string{nsNotIn}, tcp("myproject/any", "default/db", 80), false},
		{"kubernetes.io/metadata.name is on every namespace", []string{byName}, tcp("bare/nolabels", "default/db", 80), true},
		{"named port resolves on the destination", []string{namedRedis}, tcp("default/frontend", "default/db", 6379), true},
		{"named port needs the container port's protocol", []string{namedDNSOverTCP}, tcp("default/frontend", "default/db", 53), false},
		{"named port with its protocol", []string{namedDNSOverUDP}, udp("default/frontend", "default/db", 53), true},
		{"named port to a hostNetwork destination: the node's address has no named port", []string{namedEgress},
			tcp("default/db", "default/host2", 6379), false},
		{"endPort range, inclusive", []string{portRange}, tcp("default/frontend", "default/db", 32768), true},
		{"endPort range, one past the end", []string{portRange}, tcp("default/frontend", "default/db", 32769), false},
		{"allow rules add up across policies", []string{denyIngress, fromFrontend}, tcp("default/frontend", "default/db", 80), true},
		{"podSelector AND namespaceSelector in one peer", []string{andPeer}, tcp("myproject/any", "default/db", 80), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := docCluster(t, tc.policies...).Allowed(tc.conn)
			if err != nil {
				t.Fatalf("%s: %v", tc.conn, err)
			}
			if got != tc.want {
				t.Errorf("%s: allowed = %v, want %v", tc.conn, got, tc.want)
			}
		})
	}
}

func TestUnspecifiedIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		conn   Connection
	}{
		{"ipBlock deciding a node's traffic to a pod elsewhere", docExample, tcp("default/host2", "default/db", 6379)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := docCluster(t, tc.policy).Allowed(tc.conn)
			if !errors.Is(err, ErrUnspecified) {
				t.Errorf("%s: err = %v, want ErrUnspecified", tc.conn, err)
			}
		})
	}
}

const (
	denyAll = `
metadata: {name: deny-all, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress, Egress]}`
	denyIngress = `
metadata: {name: deny-ingress, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}`
	fromFrontend = `
metadata: {name: from-frontend, namespace: default}
spec:
  podSelector: {}
  ingress: [{from: [{podSelector: {matchLabels: {role: frontend}}}]}]`
	egressOnly = `
metadata: {name: egress-only, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  egress: [{to: [{podSelector: {matchLabels: {role: frontend}}}]}]`
	notIn = `
metadata: {name: not-in, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: role, operator: NotIn, values: [frontend, other, any]}]}}]}]`
	doesNotExist = `
metadata: {name: does-not-exist, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: role, operator: DoesNotExist}]}}]}]`
	nsNotIn = `
metadata: {name: ns-not-in, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: project, operator: NotIn, values: [myproject]}]}}]}]`
	byName = `
metadata: {name: by-name, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: bare}}}]}]`
	namedRedis = `
metadata: {name: named, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{ports: [{port: redis}]}]`
	namedDNSOverTCP = `
metadata: {name: named, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{ports: [{port: dns, protocol: TCP}]}]`
	namedDNSOverUDP = `
metadata: {name: named, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{ports: [{port: dns, protocol: UDP}]}]`
	namedEgress = `
metadata: {name: named-egress, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Egress]
  egress: [{ports: [{port: redis}]}]`
	portRange = `
metadata: {name: range, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{ports: [{protocol: TCP, port: 32000, endPort: 32768}]}]`
	andPeer = `
metadata: {name: and-peer, namespace: default}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress: [{from: [{namespaceSelector: {matchLabels: {project: myproject}}, podSelector: {matchLabels: {role: frontend}}}]}]`
)
