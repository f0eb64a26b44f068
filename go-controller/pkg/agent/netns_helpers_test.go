package agent

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"testing"
)

// scratchNetNS makes a network namespace of the test's own (kovs-ut-<random>), deleted
// when the test ends, and returns its name (its path is /run/netns/<name>).
func scratchNetNS(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "kovs-ut-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}
