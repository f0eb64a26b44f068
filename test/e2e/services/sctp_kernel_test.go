//go:build kovs_kernel_datapath

// SCTP Service load balancing needs the kernel datapath: OVS 3.1's userspace conntrack
// (the netdev datapath the sandbox runs, since the test machines have no OVS kernel
// module) tracks SCTP without ports, so it can neither translate an SCTP port nor tell two
// associations between the same addresses apart (docs/services.md). This test is the proof
// for the kernel datapath; it is left out of `make test` and runs only with
// `-tags kovs_kernel_datapath` on a setup whose nodes use datapath_type system. On the
// sandbox, TestServicesIPv4/SCTPRejectedOnUserspaceDatapath checks the documented fallback.

package services_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kovs-net/kovs/test/e2e/framework"
)

// TestServicesSCTPKernelDatapath: an SCTP ClusterIP reaches a backend on its targetPort.
func TestServicesSCTPKernelDatapath(t *testing.T) {
	c := newSvcCluster(t, "ipv4")
	svc := c.webService(t, "sctp", nil, svcPort("sctp", 132, intstr.FromInt32(9132), corev1.ProtocolSCTP))
	c.checkClusterIP(t, "132/sctp", "9132/sctp", framework.ClusterIPs(svc)[0])
}
