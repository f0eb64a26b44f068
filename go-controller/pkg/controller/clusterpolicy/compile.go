package clusterpolicy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// Rule is one rule of a ClusterNetworkPolicy with its subjects, peers and ports
// resolved: in Direction, traffic between the Subjects and the Peers (every address when
// AnyPeer), to one of the Ports (all traffic when empty), gets Action.
type Rule struct {
	// ID is "<policy>/<ingress|egress>/<index>", with "/<protocol>-<number>" for the rules
	// a destination named port is split into (as NetworkPolicy rule IDs are).
	ID string
	// Policy and Name name the ClusterNetworkPolicy and the rule (Name may be empty);
	// Index is the rule's position in its direction's list.
	Policy, Name string
	Index        int
	Tier         v1beta1.Tier
	Priority     int32
	Direction    policy.Direction
	Action       v1beta1.ClusterNetworkPolicyRuleAction
	// Subjects are the pods the rule applies to, sorted: the destinations of an ingress
	// rule, the sources of an egress rule.
	Subjects []policy.PodKey
	// AnyPeer: the rule matches every address (a Deny or Pass rule with a peer kovs
	// cannot read, failed closed).
	AnyPeer bool
	// Peers are the addresses of the other end, sorted and unique: pods' addresses as
	// single-address prefixes, networks, nodes' addresses.
	Peers []netip.Prefix
	Ports []policy.Port
}

// Rules are compiled rules in precedence order: Admin before Baseline, then by priority,
// policy name and index.
type Rules []Rule

// Compile resolves the policies against the cluster into rules in precedence order.
// Policies are taken as the API server accepted them; what kovs cannot enforce as
// written compiles as the package documentation says, and Check reports it.
func Compile(cnps []*v1beta1.ClusterNetworkPolicy, c *Cluster) Rules {
	var rules Rules
	for _, cnp := range cnps {
		rules = append(rules, compilePolicy(cnp, c)...)
	}
	slices.SortStableFunc(rules, compareRules)
	return rules
}

func compareRules(a, b Rule) int {
	return cmp.Or(cmp.Compare(tierRank(a.Tier), tierRank(b.Tier)), cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Index, b.Index),
		cmp.Compare(a.ID, b.ID))
}

func tierRank(t v1beta1.Tier) int {
	if t == v1beta1.AdminTier {
		return 0
	}
	return 1
}

func compilePolicy(cnp *v1beta1.ClusterNetworkPolicy, c *Cluster) []Rule {
	subjects := c.subjects(&cnp.Spec.Subject)
	var rules []Rule
	for i := range cnp.Spec.Ingress {
		r := &cnp.Spec.Ingress[i]
		peers := make([]v1beta1.ClusterNetworkPolicyEgressPeer, len(r.From))
		for j, p := range r.From {
			peers[j] = v1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: p.Namespaces, Pods: p.Pods}
		}
		base := Rule{Policy: cnp.Name, Name: r.Name, Index: i, Tier: cnp.Spec.Tier, Priority: cnp.Spec.Priority,
			Direction: policy.Ingress, Action: r.Action, Subjects: keys(subjects)}
		rules = append(rules, c.compileRule(base, subjects, peers, r.Protocols)...)
	}
	for i := range cnp.Spec.Egress {
		r := &cnp.Spec.Egress[i]
		base := Rule{Policy: cnp.Name, Name: r.Name, Index: i, Tier: cnp.Spec.Tier, Priority: cnp.Spec.Priority,
			Direction: policy.Egress, Action: r.Action, Subjects: keys(subjects)}
		rules = append(rules, c.compileRule(base, subjects, r.To, r.Protocols)...)
	}
	return rules
}

// compileRule resolves one rule's peers and ports: the rule itself for its numbered
// ports (or all traffic), and one rule per number a destination named port resolves to.
func (c *Cluster) compileRule(base Rule, subjects []*Pod, peers []v1beta1.ClusterNetworkPolicyEgressPeer,
	protocols []v1beta1.ClusterNetworkPolicyProtocol) []Rule {
	base.ID = fmt.Sprintf("%s/%s/%d", base.Policy, strings.ToLower(string(base.Direction)), base.Index)
	var peerPods []*Pod
	var prefixes []netip.Prefix
	for i := range peers {
		pods, pfx, readable := c.peer(&peers[i])
		if !readable && base.Action != v1beta1.ClusterNetworkPolicyRuleActionAccept {
			base.Action, base.AnyPeer, base.Peers, base.Ports = v1beta1.ClusterNetworkPolicyRuleActionDeny, true, nil, nil
			return []Rule{base}
		}
		peerPods = append(peerPods, pods...)
		prefixes = append(prefixes, pfx...)
	}
	for _, p := range peerPods {
		for _, ip := range p.IPs {
			prefixes = append(prefixes, policy.HostPrefix(ip))
		}
	}
	base.Peers = policy.SortPrefixes(prefixes)

	numbered, named := splitProtocols(protocols)
	var rules []Rule
	if len(protocols) == 0 || len(numbered) > 0 {
		base.Ports = numbered
		rules = append(rules, base)
	}
	for _, name := range named {
		rules = append(rules, c.namedPortRules(base, name, subjects, peerPods)...)
	}
	return rules
}

// namedPortRules splits a rule by the numbers a named port resolves to on the
// destination pods: the subjects of an ingress rule, the peer pods of an egress rule.
func (c *Cluster) namedPortRules(base Rule, name string, subjects, peerPods []*Pod) []Rule {
	dests := subjects
	if base.Direction == policy.Egress {
		dests = peerPods
	}
	byPort := map[policy.Port][]*Pod{}
	for _, p := range dests {
		for _, port := range p.resolve(name) {
			byPort[port] = append(byPort[port], p)
		}
	}
	var rules []Rule
	for port, pods := range byPort {
		r := base
		r.ID = fmt.Sprintf("%s/%s-%d", base.ID, strings.ToLower(string(port.Protocol)), port.Port)
		r.Ports = []policy.Port{port}
		if base.Direction == policy.Ingress {
			r.Subjects = keys(pods)
		} else {
			var prefixes []netip.Prefix
			for _, p := range pods {
				for _, ip := range p.IPs {
					prefixes = append(prefixes, policy.HostPrefix(ip))
				}
			}
			r.Peers = policy.SortPrefixes(prefixes)
		}
		rules = append(rules, r)
	}
	slices.SortFunc(rules, func(a, b Rule) int { return cmp.Compare(a.ID, b.ID) })
	return rules
}

// splitProtocols returns the numbered ports and the destination named ports of a rule.
func splitProtocols(protocols []v1beta1.ClusterNetworkPolicyProtocol) ([]policy.Port, []string) {
	var numbered []policy.Port
	var named []string
	add := func(proto policy.Protocol, p *v1beta1.Port) {
		switch {
		case p == nil:
			numbered = append(numbered, policy.Port{Protocol: proto})
		case p.Range != nil:
			numbered = append(numbered, policy.Port{Protocol: proto, Port: p.Range.Start, EndPort: p.Range.End})
		default:
			numbered = append(numbered, policy.Port{Protocol: proto, Port: p.Number})
		}
	}
	for _, p := range protocols {
		switch {
		case p.TCP != nil:
			add(policy.TCP, p.TCP.DestinationPort)
		case p.UDP != nil:
			add(policy.UDP, p.UDP.DestinationPort)
		case p.SCTP != nil:
			add(policy.SCTP, p.SCTP.DestinationPort)
		case p.DestinationNamedPort != "":
			if !slices.Contains(named, p.DestinationNamedPort) {
				named = append(named, p.DestinationNamedPort)
			}
		}
	}
	return numbered, named
}

// subjects returns the pods a subject selects; none when a selector cannot be read
// (Check reports it).
func (c *Cluster) subjects(s *v1beta1.ClusterNetworkPolicySubject) []*Pod {
	switch {
	case s.Namespaces != nil:
		return c.podsIn(s.Namespaces, &metav1.LabelSelector{})
	case s.Pods != nil:
		return c.podsIn(&s.Pods.NamespaceSelector, &s.Pods.PodSelector)
	}
	return nil
}

// peer returns the pods and the prefixes a peer selects, and false when kovs cannot read
// it: no field kovs knows is set, or a selector is not valid. DomainNames select nothing
// (see the package documentation).
func (c *Cluster) peer(p *v1beta1.ClusterNetworkPolicyEgressPeer) ([]*Pod, []netip.Prefix, bool) {
	switch {
	case p.Namespaces != nil:
		pods, err := c.selectPods(p.Namespaces, &metav1.LabelSelector{})
		return pods, nil, err == nil
	case p.Pods != nil:
		pods, err := c.selectPods(&p.Pods.NamespaceSelector, &p.Pods.PodSelector)
		return pods, nil, err == nil
	case p.Networks != nil:
		var prefixes []netip.Prefix
		for _, n := range p.Networks {
			if pfx, err := netip.ParsePrefix(string(n)); err == nil {
				prefixes = append(prefixes, pfx.Masked())
			}
		}
		return nil, prefixes, true
	case p.Nodes != nil:
		sel, err := metav1.LabelSelectorAsSelector(p.Nodes)
		if err != nil {
			return nil, nil, false
		}
		var prefixes []netip.Prefix
		for _, n := range c.Nodes {
			if sel.Matches(labels.Set(n.Labels)) {
				for _, ip := range n.IPs {
					prefixes = append(prefixes, policy.HostPrefix(ip))
				}
			}
		}
		return nil, prefixes, true
	case p.DomainNames != nil:
		return nil, nil, true
	}
	return nil, nil, false
}

// podsIn returns the pods the selectors select: none when one cannot be read.
func (c *Cluster) podsIn(nsSel, podSel *metav1.LabelSelector) []*Pod {
	pods, _ := c.selectPods(nsSel, podSel)
	return pods
}

// selectPods returns the pods in the namespaces nsSel selects that podSel selects.
func (c *Cluster) selectPods(nsSel, podSel *metav1.LabelSelector) ([]*Pod, error) {
	ns, err := metav1.LabelSelectorAsSelector(nsSel)
	if err != nil {
		return nil, err
	}
	ps, err := metav1.LabelSelectorAsSelector(podSel)
	if err != nil {
		return nil, err
	}
	var pods []*Pod
	for i := range c.Pods {
		p := &c.Pods[i]
		nsLabels, known := c.Namespaces[p.Namespace]
		if known && ns.Matches(labels.Set(nsLabels)) && ps.Matches(labels.Set(p.Labels)) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func keys(pods []*Pod) []policy.PodKey {
	ks := make([]policy.PodKey, len(pods))
	for i, p := range pods {
		ks[i] = p.PodKey
	}
	slices.SortFunc(ks, policy.PodKey.Compare)
	return slices.Compact(ks)
}
