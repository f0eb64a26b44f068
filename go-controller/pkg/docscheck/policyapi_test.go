package docscheck

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite dist/policy-api from the network-policy-api module")

// policyAPIModule is the module whose ClusterNetworkPolicy CRDs dist/ installs.
const policyAPIModule = "sigs.k8s.io/network-policy-api"

// TestPolicyAPICRDs checks that dist/policy-api holds the module's ClusterNetworkPolicy
// CRDs, byte for byte under a header, at the version go.mod names: the CRDs are never
// hand-kept, and a go.mod bump that forgets them fails here. -update rewrites them.
func TestPolicyAPICRDs(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", policyAPIModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v (is it required in go.mod, and is the module downloaded?)", policyAPIModule, err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	for _, channel := range []string{"standard", "experimental"} {
		src := filepath.Join(dir, "config/crd", channel, "policy.networking.k8s.io_clusternetworkpolicies.yaml")
		crd, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(crd, []byte("bundle-version: "+version+"\n")) {
			t.Errorf("%s does not say bundle-version %s: has the module's layout changed?", src, version)
		}
		want := append([]byte(crdHeader(channel)), crd...)
		dst := filepath.Join(root, "dist/policy-api", channel+".yaml")
		if *update {
			if err := os.WriteFile(dst, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not the %s channel CRD of %s %s: regenerate it with\n  go test ./go-controller/pkg/docscheck/ -run TestPolicyAPICRDs -update", dst, channel, policyAPIModule, version)
		}
	}
}

func crdHeader(channel string) string {
	return fmt.Sprintf(`# ClusterNetworkPolicy (policy.networking.k8s.io/v1beta1), %s channel: a verbatim copy of
# config/crd/%s/policy.networking.k8s.io_clusternetworkpolicies.yaml of the module
# sigs.k8s.io/network-policy-api at the version go.mod names. Do not edit: regenerate with
#   go test ./go-controller/pkg/docscheck/ -run TestPolicyAPICRDs -update
`, channel, channel)
}
