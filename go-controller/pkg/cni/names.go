package cni

import (
	"crypto/sha256"
	"encoding/hex"
)

// Host veth names: "kv" and 12 hex digits, 14 bytes, under the kernel's 15.
const (
	hostIfPrefix   = "kv"
	hostIfIDDigits = 12
)

// HostInterfaceName is the name of the host end of a sandbox's veth, and of its OVS port:
// "kv" and the first 12 hex digits of the container ID, which is how runtimes print
// sandbox IDs (crictl pods), so an operator can match one to the other. IDs that do not
// start with 12 hex digits use the first 12 hex digits of their SHA-256 instead. 48 bits
// keep names unique among the sandboxes of a node.
func HostInterfaceName(containerID string) string {
	id := containerID
	if len(id) < hostIfIDDigits || !isLowerHex(id[:hostIfIDDigits]) {
		sum := sha256.Sum256([]byte(containerID))
		id = hex.EncodeToString(sum[:])
	}
	return hostIfPrefix + id[:hostIfIDDigits]
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
