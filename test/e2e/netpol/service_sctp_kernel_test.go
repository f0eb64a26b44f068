//go:build kovs_kernel_datapath

package netpol_test

// serviceSCTP says whether Services carry SCTP: on the kernel datapath they do.
const serviceSCTP = true
