package networkpolicy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/growth"
)

// The growth benchmarks check that the compiler's cost is linear in the cluster along
// each axis (nodes, pods, rules, selected namespaces): each builds a cluster of size n
// and of size 2n straight into a model, runs the same kind of work on both (a churn
// proportional to the size), and reports the ratio of their CPU time and allocation
// (package growth). A ratio near 2 is linear; one near 4 is a cost per event that grows
// with the cluster.

// churnRounds is how many times a benchmark's churn changes each object it changes.
const churnRounds = 5

// growthCluster is a model of a cluster being built for a growth benchmark.
type growthCluster struct {
	m     *model
	g     *generator
	nodes int
}

func newGrowthCluster(nodes int) *growthCluster {
	return &growthCluster{m: newModel(), g: newGenerator(uint64(nodes)), nodes: nodes}
}

// pod returns a pod on a random node with a random address.
func (c *growthCluster) pod(ns, name string, labels map[string]string) *corev1.Pod {
	p := c.g.pod(ns, name, labels)
	p.Spec.NodeName = fmt.Sprint("node-", c.g.rng.IntN(c.nodes))
	return p
}

// readdress returns p with a new random address.
func (c *growthCluster) readdress(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	ip := fmt.Sprintf("10.%d.%d.%d", c.g.rng.IntN(256), c.g.rng.IntN(256), c.g.rng.IntN(256))
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	return p
}

// watchAll subscribes to every node, as the realization tracker does.
func (c *growthCluster) watchAll() {
	for i := range c.nodes {
		c.m.subscribe(fmt.Sprint("node-", i))
	}
}

// commit ends a batch and builds the delta of every subscriber it concerns, as the
// policy stream does.
// inBatches makes n changes with set, committing a batch after every tenth and after the
// last.
func (c *growthCluster) inBatches(n int, set func(i int)) {
	for i := range n {
		set(i)
		if i%10 == 9 {
			c.commit()
		}
	}
	c.commit()
}

func (c *growthCluster) commit() {
	for _, s := range c.m.commit() {
		c.m.delta(s)
	}
}

// BenchmarkAddressPatchGrowth grows the nodes: n nodes, every one watched, n/5 namespaces
// of two servers and three clients on random nodes, each with a policy that lets its
// clients reach its servers. The work gives every client a new address, one namespace
// per batch, five times over: each batch patches one address set on the few nodes of
// that namespace's servers.
func BenchmarkAddressPatchGrowth(b *testing.B) {
	growth.Ratio2x(b, 2000, func(n int) func() {
		c := newGrowthCluster(n)
		var clients [][]*corev1.Pod // per namespace, its clients' successive versions
		for range n / 5 {
			ns := c.g.name("")
			for i := range 2 {
				p := c.pod(ns, fmt.Sprint("server-", i), map[string]string{"app": "server"})
				c.m.setPod(podKey(p), p)
			}
			var mine []*corev1.Pod
			for i := range 3 {
				p := c.pod(ns, fmt.Sprint("client-", i), map[string]string{"app": "client"})
				c.m.setPod(podKey(p), p)
				for range churnRounds {
					p = c.readdress(p)
					mine = append(mine, p)
				}
			}
			clients = append(clients, mine)
			np := c.g.policy(ns, "np", map[string]string{"app": "server"}, map[string]string{"app": "client"})
			c.m.setPolicy(objectKey(np), np)
		}
		c.watchAll()
		c.commit()
		return func() {
			for round := range churnRounds {
				for _, ns := range clients {
					for i := round; i < len(ns); i += churnRounds {
						c.m.setPod(podKey(ns[i]), ns[i])
					}
					c.commit()
				}
			}
		}
	})
}

// BenchmarkNamespaceSelectorGrowth grows the selected namespaces: n namespaces labelled
// app=<name>, of four pods each, each with a policy that admits the pods of the next
// namespace by a namespaceSelector (n groups with a namespaceSelector). The work gives
// every pod a new address and every namespace a new label, one namespace per batch,
// twice over: each event concerns one or two of those groups.
func BenchmarkNamespaceSelectorGrowth(b *testing.B) {
	const rounds = 2
	growth.Ratio2x(b, 500, func(n int) func() {
		c := newGrowthCluster(n)
		names := make([]string, n)
		for i := range names {
			names[i] = c.g.name("")
		}
		type nsChurn struct {
			ns   []*corev1.Namespace
			pods [][]*corev1.Pod
		}
		churn := make([]nsChurn, n)
		for i, name := range names {
			ns := namespaceObj(name, "app="+name)
			c.m.setNamespace(name, ns)
			for r := range rounds {
				churn[i].ns = append(churn[i].ns, namespaceObj(name, "app="+name, fmt.Sprint("rev=", r)))
			}
			for j := range 4 {
				p := c.pod(name, fmt.Sprint("pod-", j), map[string]string{"app": "web"})
				c.m.setPod(podKey(p), p)
				var versions []*corev1.Pod
				for range rounds {
					p = c.readdress(p)
					versions = append(versions, p)
				}
				churn[i].pods = append(churn[i].pods, versions)
			}
			np := policyObj(name, "from-next", sel("app=web"), nil,
				in(from(nsPeer(sel("app="+names[(i+1)%n])))), nil)
			c.m.setPolicy(objectKey(np), np)
		}
		c.commit()
		return func() {
			for r := range rounds {
				for i, name := range names {
					for _, versions := range churn[i].pods {
						c.m.setPod(podKey(versions[r]), versions[r])
					}
					c.m.setNamespace(name, churn[i].ns[r])
					c.commit()
				}
			}
		}
	})
}

// BenchmarkGroupAddressGrowth grows the pods of one group: one namespace of n clients
// (app=web) on n/2 nodes, and two servers admitting them (one address set of n
// addresses, held by the servers' nodes), every node watched. The work gives every
// client a new address, ten per batch, five times over: each batch changes ten
// addresses of the set.
func BenchmarkGroupAddressGrowth(b *testing.B) {
	growth.Ratio2x(b, 2000, func(n int) func() {
		c := newGrowthCluster(n / 2)
		versions := make([][]*corev1.Pod, churnRounds) // per round
		for i := range n {
			p := c.pod("web", fmt.Sprint("client-", i), map[string]string{"app": "web"})
			c.m.setPod(podKey(p), p)
			for r := range churnRounds {
				p = c.readdress(p)
				versions[r] = append(versions[r], p)
			}
		}
		for i := range 2 {
			p := c.pod("web", fmt.Sprint("server-", i), map[string]string{"app": "server"})
			c.m.setPod(podKey(p), p)
		}
		np := c.g.policy("web", "np", map[string]string{"app": "server"}, map[string]string{"app": "web"})
		c.m.setPolicy(objectKey(np), np)
		c.watchAll()
		c.commit()
		return func() {
			for _, round := range versions {
				c.inBatches(len(round), func(i int) { c.m.setPod(podKey(round[i]), round[i]) })
			}
		}
	})
}

// BenchmarkNamespaceSelectorPolicyGrowth grows the rules with the namespaces: n
// namespaces labelled app=<name>, of four pods each. The work creates, ten per batch, a
// policy per namespace that admits the pods of the next namespace by a namespaceSelector:
// each new group with a namespaceSelector fills from the namespaces it selects.
func BenchmarkNamespaceSelectorPolicyGrowth(b *testing.B) {
	growth.Ratio2x(b, 1000, func(n int) func() {
		c := newGrowthCluster(n)
		names := make([]string, n)
		for i := range names {
			names[i] = c.g.name("")
			c.m.setNamespace(names[i], namespaceObj(names[i], "app="+names[i]))
			for j := range 4 {
				p := c.pod(names[i], fmt.Sprint("pod-", j), map[string]string{"app": "web"})
				c.m.setPod(podKey(p), p)
			}
		}
		c.commit()
		policies := make([]*networkingv1.NetworkPolicy, n)
		for i, name := range names {
			policies[i] = policyObj(name, "from-next", sel("app=web"), nil, in(from(nsPeer(sel("app="+names[(i+1)%n])))), nil)
		}
		return func() {
			c.inBatches(len(policies), func(i int) { c.m.setPolicy(objectKey(policies[i]), policies[i]) })
		}
	})
}

// BenchmarkNamedPortGrowth grows the pods and the named-port policies over them: one
// namespace of n pods (app=web) serving "http" on 8080, on n/2 nodes, and n/10 policies
// that admit ingress to them on port "http". The work gives every pod a new address, ten
// per batch, five times over: each batch changes the members of the group the policies
// resolve "http" over, and never what it resolves to.
func BenchmarkNamedPortGrowth(b *testing.B) {
	growth.Ratio2x(b, 1000, namedPortChurn)
}

// namedPortChurn builds BenchmarkNamedPortGrowth's cluster of n pods and returns its churn.
func namedPortChurn(n int) func() {
	c := newGrowthCluster(n / 2)
	versions := make([][]*corev1.Pod, churnRounds) // per round
	for i := range n {
		p := c.pod("web", fmt.Sprint("pod-", i), map[string]string{"app": "web"})
		p.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}
		c.m.setPod(podKey(p), p)
		for r := range churnRounds {
			p = c.readdress(p)
			versions[r] = append(versions[r], p)
		}
	}
	for i := range n / 10 {
		np := policyObj("web", fmt.Sprint("np-", i), sel("app=web"), nil,
			in(networkingv1.NetworkPolicyIngressRule{Ports: ports("http")}), nil)
		c.m.setPolicy(objectKey(np), np)
	}
	c.commit()
	return func() {
		for _, round := range versions {
			c.inBatches(len(round), func(i int) { c.m.setPod(podKey(round[i]), round[i]) })
		}
	}
}
