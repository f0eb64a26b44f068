package ovsbench

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// The shape of the benchmarked node: 1,000 local pods in 20 namespaces, each namespace
// holding 10 label groups (app=g0..g9) of 5 pods; 1,000 policies, 5 per group; 100 peer
// address sets of 5 to 20 pods on other nodes, each shared by 10 policies.
const (
	localPods          = 1000
	policies           = 1000
	namespaces         = 20
	groupsPerNamespace = 10
	podsPerGroup       = localPods / (namespaces * groupsPerNamespace)
	peerSets           = 100
	nodeName           = "node-1"
	firstPodOFPort     = 3 // 1 and 2 are the tunnel and the gateway
)

// The node's addresses: a /22 block (1,022 pod addresses) in 10.244.0.0/16, three tunnel
// peers with a /22 each.
var (
	podBlock     = netip.MustParsePrefix("10.244.4.0/22")
	clusterCIDR  = netip.MustParsePrefix("10.244.0.0/16")
	peerBlocks   = []netip.Prefix{netip.MustParsePrefix("10.244.8.0/22"), netip.MustParsePrefix("10.244.12.0/22"), netip.MustParsePrefix("10.244.16.0/22")}
	peerUnderlay = []netip.Addr{netip.MustParseAddr("172.31.0.2"), netip.MustParseAddr("172.31.0.3"), netip.MustParseAddr("172.31.0.4")}
)

// nodeConfig is node-1 with the agent's fixed tunnel and gateway ports.
func nodeConfig() pipeline.NodeConfig {
	return pipeline.NodeConfig{
		Name: nodeName, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x04, 0x01},
		GatewayIPs: []netip.Addr{nthAddr(podBlock, 1)}, PodSubnets: []netip.Prefix{podBlock},
		ClusterCIDRs: []netip.Prefix{clusterCIDR}, TunnelOFPort: 1, GatewayOFPort: 2,
		UnderlayIPs: []netip.Addr{netip.MustParseAddr("172.31.0.1")},
	}
}

// tunnelPeers are the three other nodes.
func tunnelPeers() []pipeline.TunnelPeer {
	peers := make([]pipeline.TunnelPeer, len(peerBlocks))
	for i, block := range peerBlocks {
		peers[i] = pipeline.TunnelPeer{NodeName: fmt.Sprintf("node-%d", i+2), UnderlayIP: peerUnderlay[i],
			PodSubnets: []netip.Prefix{block}, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, byte(8 + 4*i), 0x01}}
	}
	return peers
}

// nthAddr is the n-th address of block.
func nthAddr(block netip.Prefix, n int) netip.Addr {
	a := block.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// localPod is pod i of the node: namespace ns-<i/50>, group g<(i%50)/5>, ofport 3+i,
// address .2+i of the block.
func localPod(i int) pipeline.PodPort {
	ip := nthAddr(podBlock, 2+i)
	a := ip.As4()
	return pipeline.PodPort{
		Namespace: podNamespace(i), Name: fmt.Sprintf("app-%s-%d", podGroup(i), i%podsPerGroup),
		UID: fmt.Sprintf("uid-%04d", i), OFPort: uint32(firstPodOFPort + i),
		MAC: net.HardwareAddr{0x0a, 0x58, a[0], a[1], a[2], a[3]}, IPs: []netip.Addr{ip},
	}
}

func podNamespace(i int) string { return fmt.Sprintf("ns-%02d", i/(localPods/namespaces)) }

func podGroup(i int) string { return fmt.Sprintf("g%d", i%(localPods/namespaces)/podsPerGroup) }

// localPodPorts are the node's 1,000 pods, in index order.
func localPodPorts() []pipeline.PodPort {
	pods := make([]pipeline.PodPort, localPods)
	for i := range pods {
		pods[i] = localPod(i)
	}
	return pods
}

// portMixes are the ports of the policies, by policy index modulo 6: one to three ports,
// two of the mixes with a range (100 ports: 4 and 3 value/mask matches).
var portMixes = [][]policy.Port{
	{{Protocol: policy.TCP, Port: 80}},
	{{Protocol: policy.TCP, Port: 8080}, {Protocol: policy.TCP, Port: 8443}},
	{{Protocol: policy.UDP, Port: 53}, {Protocol: policy.TCP, Port: 53}},
	{{Protocol: policy.TCP, Port: 30000, EndPort: 30099}},
	{{Protocol: policy.TCP, Port: 443}, {Protocol: policy.TCP, Port: 9000, EndPort: 9099}, {Protocol: policy.UDP, Port: 5000}},
	{{Protocol: policy.SCTP, Port: 3868}, {Protocol: policy.TCP, Port: 6379}},
}

// peerSet is remote address set k: 5 to 20 pods of peer node k%3, disjoint from the other
// sets.
func peerSet(k int) policy.AddressSet {
	s := policy.AddressSet{ID: fmt.Sprintf("s-%03d", k)}
	for j := range 5 + k%16 {
		s.Addresses = append(s.Addresses, policy.HostPrefix(nthAddr(peerBlocks[k%3], 2+(k/3)*20+j)))
	}
	s.Addresses = policy.SortPrefixes(s.Addresses)
	return s
}

// benchShare is node-1's share: policy p (ns-<p%20>/np-<p>) selects group g<(p/20)%10> of
// its namespace and allows ingress from peer set p%100 on port mix p%6; every fourth policy
// also isolates egress and allows DNS to two remote pods, and every eighth HTTPS to
// 10.0.0.0/8 except 10.0.5.0/24 (an ipBlock: 8 prefixes).
func benchShare() policy.NodeShare {
	s := policy.NewNodeShare(nodeName)
	s.Generation = 1
	pods := localPodPorts()
	groups := map[string]*policy.AppliedToSet{}
	for i, p := range pods {
		k := policy.PodKey{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		s.Pods = append(s.Pods, k)
		id := groupID(p.Namespace, podGroup(i))
		if groups[id] == nil {
			groups[id] = &policy.AppliedToSet{ID: id}
		}
		groups[id].Pods = append(groups[id].Pods, policy.AppliedPod{PodKey: k, IPs: p.IPs})
	}
	for id, g := range groups {
		slices.SortFunc(g.Pods, func(x, y policy.AppliedPod) int { return x.PodKey.Compare(y.PodKey) })
		s.AppliedToSets[id] = *g
	}
	for k := range peerSets {
		set := peerSet(k)
		s.AddressSets[set.ID] = set
	}
	dns := policy.AddressSet{ID: "s-dns", Addresses: policy.SortPrefixes([]netip.Prefix{
		policy.HostPrefix(nthAddr(peerBlocks[0], 1000)), policy.HostPrefix(nthAddr(peerBlocks[1], 1000))})}
	block := policy.AddressSet{ID: "b-10.0.0.0/8-except", Addresses: policy.SubtractPrefixes(
		netip.MustParsePrefix("10.0.0.0/8"), []netip.Prefix{netip.MustParsePrefix("10.0.5.0/24")})}
	s.AddressSets[dns.ID], s.AddressSets[block.ID] = dns, block
	ingress, egress := map[policy.PodKey]bool{}, map[policy.PodKey]bool{}
	for p := range policies {
		ns, group := fmt.Sprintf("ns-%02d", p%namespaces), fmt.Sprintf("g%d", (p/namespaces)%groupsPerNamespace)
		ref := policy.PolicyRef{Namespace: ns, Name: fmt.Sprintf("np-%04d", p)}
		applied := groupID(ns, group)
		addRule(s, ref, policy.Ingress, 0, applied, []string{peerSet(p % peerSets).ID}, portMixes[p%len(portMixes)])
		markIsolated(ingress, s.AppliedToSets[applied])
		if p%4 != 0 {
			continue
		}
		markIsolated(egress, s.AppliedToSets[applied])
		addRule(s, ref, policy.Egress, 0, applied, []string{dns.ID}, portMixes[2])
		if p%8 == 0 {
			addRule(s, ref, policy.Egress, 1, applied, []string{block.ID}, []policy.Port{{Protocol: policy.TCP, Port: 443}})
		}
	}
	s.Isolation = policy.Isolation{Ingress: sortedKeys(ingress), Egress: sortedKeys(egress)}
	slices.SortFunc(s.Pods, policy.PodKey.Compare)
	return s
}

func groupID(namespace, group string) string { return "g-" + namespace + "-app=" + group }

func addRule(s policy.NodeShare, ref policy.PolicyRef, dir policy.Direction, index int, applied string, peers []string, ports []policy.Port) {
	id := fmt.Sprintf("%s/%s/%s/%d", ref.Namespace, ref.Name, map[policy.Direction]string{policy.Ingress: "ingress", policy.Egress: "egress"}[dir], index)
	s.Rules[id] = policy.Rule{ID: id, Policy: ref, RuleIndex: index, Direction: dir, AppliedTo: applied, Peers: peers,
		Ports: ports, Action: policy.ActionAllow}
}

func markIsolated(set map[policy.PodKey]bool, g policy.AppliedToSet) {
	for _, p := range g.Pods {
		set[p.PodKey] = true
	}
}

func sortedKeys(set map[policy.PodKey]bool) []policy.PodKey {
	keys := make([]policy.PodKey, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, policy.PodKey.Compare)
	return keys
}

// flowFormula is the flow count the formula predicts for a node: base +
// perPod*pods + perPeer*peers for the node itself (constants derived from the pipeline's
// smallest cases), plus, per policy direction, one clause flow per distinct selected pod,
// peer prefix and port match (a range counting its value/mask matches), one conj_id flow
// per rule, and a default deny per isolated pod and direction: a sum, never a product. It
// holds for shares whose rules all have peers and ports (every rule a conjunction), as
// benchShare's do. product is what one flow per (pod, peer, port) of each rule would be.
type flowFormula struct {
	node, policy, product int
	terms                 string
}

func predictFlows(b *pipeline.Builder, share policy.NodeShare, pods []pipeline.PodPort, peers []pipeline.TunnelPeer) (flowFormula, error) {
	count := func(pods []pipeline.PodPort, peers []pipeline.TunnelPeer) (int, error) {
		flows, err := b.NodeFlows(pods, peers)
		return len(flows), err
	}
	base, err := count(nil, nil)
	if err != nil {
		return flowFormula{}, err
	}
	withPod, err := count(pods[:1], nil)
	if err != nil {
		return flowFormula{}, err
	}
	withPeer, err := count(nil, peers[:1])
	if err != nil {
		return flowFormula{}, err
	}
	perPod, perPeer := withPod-base, withPeer-base
	f := flowFormula{node: base + perPod*len(pods) + perPeer*len(peers)}
	f.terms = fmt.Sprintf("node %d + %d*%d pods + %d*%d peers = %d", base, perPod, len(pods), perPeer, len(peers), f.node)
	for _, dir := range []policy.Direction{policy.Ingress, policy.Egress} {
		a, p, r, k, product := policyTerms(share, dir)
		f.policy += a + p + r + k
		f.product += product
		f.terms += fmt.Sprintf("; %s: %d pods + %d peer prefixes + %d port matches + %d rules", dir, a, p, r, k)
	}
	deny := len(share.Isolation.Ingress) + len(share.Isolation.Egress)
	f.policy += deny
	f.terms += fmt.Sprintf("; %d default denies", deny)
	return f, nil
}

// policyTerms counts the distinct clause matches of one direction's rules and their rules,
// and the flows a cross product would need.
func policyTerms(share policy.NodeShare, dir policy.Direction) (pods, prefixes, ports, rules, product int) {
	podSet, prefixSet, portSet := map[policy.PodKey]bool{}, map[netip.Prefix]bool{}, map[string]bool{}
	for _, r := range share.Rules {
		if r.Direction != dir {
			continue
		}
		rules++
		applied := share.AppliedToSets[r.AppliedTo].Pods
		for _, p := range applied {
			podSet[p.PodKey] = true
		}
		var rulePrefixes int
		for _, id := range r.Peers {
			for _, p := range share.AddressSets[id].Addresses {
				prefixSet[p.Masked()] = true
				rulePrefixes++
			}
		}
		var rulePorts int
		for _, p := range r.Ports {
			hi := max(p.EndPort, p.Port)
			for _, m := range pipeline.PortRangeMasks(uint16(p.Port), uint16(hi)) {
				portSet[fmt.Sprintf("%s/%d/%#x", p.Protocol, m.Value, m.Mask)] = true
				rulePorts++
			}
		}
		product += len(applied) * rulePrefixes * rulePorts
	}
	return len(podSet), len(prefixSet), len(portSet), rules, product
}
