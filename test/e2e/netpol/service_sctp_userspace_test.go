//go:build !kovs_kernel_datapath

package netpol_test

// serviceSCTP says whether Services carry SCTP: not on the userspace datapath the sandbox
// runs (see TestTruthTableViaService).
const serviceSCTP = false
