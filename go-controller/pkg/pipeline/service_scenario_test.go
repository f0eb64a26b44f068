package pipeline

import (
	"net/netip"
	"testing"
)

// The reference Service scenario is node-1 of the three-node dual-stack cluster (pods
// web-1 on ofport 3 and client-1 on ofport 4), with these Services:
//
//	default/web:http/TCP    10.96.0.10:80 and fd00:10:96::a:80 -> web-1, web-2, web-3 :8080,
//	                        NodePort 30080 (externalTrafficPolicy Cluster: the same group)
//	default/dns:dns/UDP     10.96.0.53:53 -> web-2, web-3 :5353, sessionAffinity ClientIP 60 s
//	default/local:http/TCP  10.96.0.30:80 -> web-1, web-2 :8080, NodePort 30090 with
//	                        externalTrafficPolicy Local: NodePort traffic only to web-1
//	default/empty:http/TCP  10.96.0.20:80, no endpoints
//	default/sig:sig/SCTP    10.96.0.40:132 and fd00:10:96::28:132 -> web-2, web-3 :9132,
//	                        stateless (the userspace datapath)
var (
	webVIP4, webVIP6 = ip("10.96.0.10"), ip("fd00:10:96::a")
	dnsVIP           = ip("10.96.0.53")
	localVIP         = ip("10.96.0.30")
	sigVIP4, sigVIP6 = ip("10.96.0.40"), ip("fd00:10:96::28")
	emptyVIP         = ip("10.96.0.20")
)

func ep(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func serviceScenarioPorts() []ServicePort {
	web4 := ServiceGroup{ID: ServiceGroupBase | 1, Endpoints: []netip.AddrPort{ep("10.244.1.10:8080"), ep("10.244.2.10:8080"), ep("10.244.3.10:8080")}}
	web6 := ServiceGroup{ID: ServiceGroupBase | 2, Endpoints: []netip.AddrPort{ep("[fd00:10:244:1::a]:8080"), ep("[fd00:10:244:2::a]:8080"), ep("[fd00:10:244:3::a]:8080")}}
	dns := ServiceGroup{ID: ServiceGroupBase | 3, Endpoints: []netip.AddrPort{ep("10.244.2.10:5353"), ep("10.244.3.10:5353")}}
	local := ServiceGroup{ID: ServiceGroupBase | 4, Endpoints: []netip.AddrPort{ep("10.244.1.10:8080"), ep("10.244.2.10:8080")}}
	localExt := ServiceGroup{ID: ServiceGroupBase | 5, Endpoints: []netip.AddrPort{ep("10.244.1.10:8080")}}
	sig4 := ServiceGroup{ID: ServiceGroupBase | 7, Endpoints: []netip.AddrPort{ep("10.244.2.10:9132"), ep("10.244.3.10:9132")}}
	sig6 := ServiceGroup{ID: ServiceGroupBase | 8, Endpoints: []netip.AddrPort{ep("[fd00:10:244:2::a]:9132"), ep("[fd00:10:244:3::a]:9132")}}
	return []ServicePort{
		{Name: "default/sig:sig/SCTP", ClusterIP: sigVIP4, IPProto: IPProtoSCTP, Port: 132, Internal: sig4, External: sig4, Stateless: true},
		{Name: "default/sig:sig/SCTP", ClusterIP: sigVIP6, IPProto: IPProtoSCTP, Port: 132, Internal: sig6, External: sig6, Stateless: true},
		{Name: "default/web:http/TCP", ClusterIP: webVIP4, IPProto: IPProtoTCP, Port: 80, NodePort: 30080, Internal: web4, External: web4},
		{Name: "default/web:http/TCP", ClusterIP: webVIP6, IPProto: IPProtoTCP, Port: 80, NodePort: 30080, Internal: web6, External: web6},
		{Name: "default/dns:dns/UDP", ClusterIP: dnsVIP, IPProto: IPProtoUDP, Port: 53, Internal: dns, External: dns, AffinityTimeout: 60},
		{Name: "default/local:http/TCP", ClusterIP: localVIP, IPProto: IPProtoTCP, Port: 80, NodePort: 30090, Internal: local, External: localExt},
		{Name: "default/empty:http/TCP", ClusterIP: emptyVIP, IPProto: IPProtoTCP, Port: 80,
			Internal: ServiceGroup{ID: ServiceGroupBase | 6}, External: ServiceGroup{ID: ServiceGroupBase | 6}},
	}
}

// serviceScenario compiles node-1's flows and groups with the reference Services.
func serviceScenario(t *testing.T) (scenario, []Flow, []Group) {
	t.Helper()
	sc := threeNodesDualStack(1)
	sc.name, sc.title = "three-nodes-dual-stack-node-1-services", "three nodes, dual-stack: node-1 with Services"
	flows, groups := withServices(t, sc, serviceScenarioPorts())
	return sc, flows, groups
}

// withServices compiles sc's node with Service ports (as one Service): its flows,
// sorted, and groups.
func withServices(t *testing.T, sc scenario, ports []ServicePort) ([]Flow, []Group) {
	t.Helper()
	sc.services = map[string][]ServicePort{"scenario/services": ports}
	c := sc.compile(t, Stages())
	return c.Flows, c.Groups
}
