// Package services_test proves, end to end in a sandbox, what issue 6 asks of Services
// load-balanced in br-int without kube-proxy: each item of the issue is one subtest, run
// against a real kube-apiserver and kube-controller-manager (which maintains the
// EndpointSlices of Services with a selector) and kovs, probing from inside pods, from
// the nodes' own network namespaces and from a host on the underlay with the sandbox's
// responder, whose answer names the backend and the source address it saw.
//
// Run one item with, for example,
//
//	go test -v -run 'TestServicesIPv4/SessionAffinityClientIP' ./test/e2e/services/
//
// The sandbox of a Test function comes up once for all its subtests.
package services_test

import "testing"

// TestServicesIPv4 runs every item on a 3-node IPv4 sandbox.
func TestServicesIPv4(t *testing.T) {
	c := newSvcCluster(t, "ipv4")
	t.Run("ClusterIPTCP", c.testClusterIPTCP)
	t.Run("ClusterIPUDP", c.testClusterIPUDP)
	t.Run("FragmentedUDP", c.testFragmentedUDP)
	t.Run("ClusterIPSCTP", c.testClusterIPSCTP)
	t.Run("MultiplePorts", c.testMultiplePorts)
	// Before any item deletes its namespace: the deletions change flows on their own.
	t.Run("EndpointChangeIsIncremental", c.testEndpointChangeIsIncremental)
	t.Run("NamedTargetPortDiffersBetweenBackends", c.testNamedTargetPort)
	t.Run("SpreadOverAllBackends", c.testSpread)
	t.Run("SessionAffinityClientIP", c.testSessionAffinity)
	t.Run("RemovedEndpointKeepsEstablished", c.testRemovedEndpoint)
	t.Run("NotReadyEndpointKeepsEstablished", c.testNotReadyEndpoint)
	t.Run("UDPFlowFollowsEndpoints", c.testUDPFlowFollowsEndpoints)
	t.Run("SCTPAssociationKeepsEndpoint", c.testSCTPAssociationKeepsEndpoint)
	t.Run("TerminatingEndpointsOnlyAsLastResort", c.testTerminatingFallback)
	t.Run("NoEndpointsRejects", c.testNoEndpointsRejects)
	t.Run("UnknownPortRejects", c.testUnknownPortRejects)
	t.Run("Hairpin", c.testHairpin)
	t.Run("SCTPHairpin", c.testSCTPHairpin)
	t.Run("ClusterIPFromNode", c.testClusterIPFromNode)
	t.Run("HostNetworkEndpoint", c.testHostNetworkEndpoint)
	t.Run("HostNetworkEndpointsOnEveryNode", c.testHostNetworkEndpointsEverywhere)
	t.Run("HeadlessAndServiceProxyNameLabels", c.testProxyLabels)
	t.Run("ProxyHealthURL", c.testProxyHealthURL)
	t.Run("InternalTrafficPolicyLocal", c.testInternalTrafficPolicyLocal)
	t.Run("TopologyHints", c.testTopologyHints)
	t.Run("NodePortFromOwnNode", c.testNodePortFromOwnNode)
	t.Run("NodePortFromOtherNode", c.testNodePortFromOtherNode)
	t.Run("SCTPNodePort", c.testSCTPNodePort)
	t.Run("ExternalTrafficPolicyLocal", c.testExternalTrafficPolicyLocal)
	t.Run("NodePortMeetsNetworkPolicy", c.testNodePortMeetsNetworkPolicy)
}

// TestServicesIPv6 runs the address-family-sensitive items on a 3-node IPv6 sandbox.
func TestServicesIPv6(t *testing.T) {
	c := newSvcCluster(t, "ipv6")
	t.Run("ClusterIPTCP", c.testClusterIPTCP)
	t.Run("ClusterIPUDP", c.testClusterIPUDP)
	t.Run("FragmentedUDP", c.testFragmentedUDP)
	t.Run("ClusterIPSCTP", c.testClusterIPSCTP)
	t.Run("SpreadOverAllBackends", c.testSpread)
	t.Run("SCTPAssociationKeepsEndpoint", c.testSCTPAssociationKeepsEndpoint)
	t.Run("UDPFlowFollowsEndpoints", c.testUDPFlowFollowsEndpoints)
	t.Run("NoEndpointsRejects", c.testNoEndpointsRejects)
	t.Run("UnknownPortRejects", c.testUnknownPortRejects)
	t.Run("Hairpin", c.testHairpin)
	t.Run("SCTPHairpin", c.testSCTPHairpin)
	t.Run("ClusterIPFromNode", c.testClusterIPFromNode)
	t.Run("NodePortFromOwnNode", c.testNodePortFromOwnNode)
	t.Run("NodePortFromOtherNode", c.testNodePortFromOtherNode)
	t.Run("SCTPNodePort", c.testSCTPNodePort)
	t.Run("ExternalTrafficPolicyLocal", c.testExternalTrafficPolicyLocal)
	t.Run("NodePortMeetsNetworkPolicy", c.testNodePortMeetsNetworkPolicy)
}

// TestServicesDualStack proves a RequireDualStack Service answers on both of its
// ClusterIPs and both node address families, on a 3-node dual-stack sandbox.
func TestServicesDualStack(t *testing.T) {
	c := newSvcCluster(t, "dual")
	t.Run("ClusterIPBothFamilies", c.testDualStackClusterIP)
	t.Run("NodePortBothFamilies", c.testDualStackNodePort)
}
