// Package integration tests pkg/ovs against a real ovsdb-server and
// ovs-vswitchd (userspace datapath, no kernel module) started by
// pkg/ovs/ovstest. The tests need root and the openvswitch-switch binaries;
// without them they skip with a message saying why (make test runs as root, and its
// accounting fails such a skip).
//
// TestTracerAgreesWithOVS is the one test here of more than pkg/ovs: it checks the Go
// packet tracer of pkg/pipeline, which the pipeline's behaviour tests rely on, against
// ovs-vswitchd's own ofproto/trace, on every packet the pipeline's randomized test traces
// (recorded by that test into a corpus; see pkg/pipeline/trace_corpus_test.go), and reads
// the traces with kovsctl's parser.
package integration
