package policyapi

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite base/ from the network-policy-api module")

const module = "sigs.k8s.io/network-policy-api"

// TestManifestsFromModule checks that base/ is the module's conformance/base at the
// version go.mod names, plus the base manifests without SCTP; -update rewrites it.
func TestManifestsFromModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "conformance", "base")
	want := map[string][]byte{}
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		want[filepath.Join("base", rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stripped, removed, err := WithoutSCTP(want["base/manifests.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	want[BaseManifests] = stripped
	t.Logf("%d SCTP porter containers removed from the base manifests", removed)
	if *update {
		if err := os.RemoveAll("base"); err != nil {
			t.Fatal(err)
		}
		for name, data := range want {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string][]byte{}
	err = fs.WalkDir(Manifests, "base", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		got[path], err = fs.ReadFile(Manifests, path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		return // Manifests is the embedded copy from before the rewrite
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s differs from the module's (or is missing): regenerate with\n  go test ./test/e2e/conformance/policyapi/ -run TestManifestsFromModule -update", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is not in the module: regenerate", name)
		}
	}
}

func TestWithoutSCTP(t *testing.T) {
	in := `spec:
  containers:
    - name: web
      image: agnhost
      command: ["/agnhost serve-hostname --port {{ index .HostNetworkPorts 1 }}"]
      ports:
        - containerPort: 80
          name: web
    - name: sctp
      image: agnhost
      command: ["/bin/bash", "-c", "/agnhost porter"]
      env:
      - name: SERVE_SCTP_PORT_9003
        value: "foo"
    - name: udp
      image: agnhost
---
kind: Namespace
`
	want := `spec:
  containers:
    - name: web
      image: agnhost
      command: ["/agnhost serve-hostname --port {{ index .HostNetworkPorts 1 }}"]
      ports:
        - containerPort: 80
          name: web
    - name: udp
      image: agnhost
---
kind: Namespace
`
	got, removed, err := WithoutSCTP([]byte(in))
	if err != nil || removed != 1 || string(got) != want {
		t.Fatalf("removed %d, err %v:\n%s", removed, err, got)
	}
	if _, _, err := WithoutSCTP([]byte("    - name: x\n      protocol: SCTP\n")); err == nil || !strings.Contains(err.Error(), "still mention SCTP") {
		t.Errorf("an SCTP port that is no porter container: err %v", err)
	}
}
