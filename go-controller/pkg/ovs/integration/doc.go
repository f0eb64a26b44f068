// Package integration tests pkg/ovs against a real ovsdb-server and
// ovs-vswitchd (userspace datapath, no kernel module) started by
// pkg/ovs/ovstest. The tests need root and the openvswitch-switch binaries;
// without them they skip with a message saying why.
package integration
