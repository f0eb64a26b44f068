// Package roottest tests kovs-ovs (go-controller/cmd/kovs-ovs, built by the tests) for
// real: as root, with the Debian openvswitch-switch daemons, each test in its own
// temporary directories and a network namespace it creates and deletes. The tests skip
// when not run as root; as root, missing OVS binaries fail them (never a silent skip).
package roottest
