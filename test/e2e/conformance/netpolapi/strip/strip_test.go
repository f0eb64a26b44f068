package strip

import (
	"io/fs"
	"strings"
	"testing"

	"sigs.k8s.io/network-policy-api/conformance"
)

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

// TestModuleManifests strips the base manifests of the module version go.mod names: each
// of the 5 StatefulSets has two SCTP porter containers, and the StatefulSets stay.
func TestModuleManifests(t *testing.T) {
	in, err := fs.ReadFile(conformance.Manifests, "base/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, removed, err := WithoutSCTP(in)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 10 {
		t.Errorf("removed %d SCTP porter containers, want 10 (2 in each of the 5 StatefulSets)", removed)
	}
	if got, want := strings.Count(string(out), "kind: StatefulSet"), strings.Count(string(in), "kind: StatefulSet"); got != want || got != 5 {
		t.Errorf("%d StatefulSets left of %d, want 5", got, want)
	}
	if got, want := strings.Count(string(out), "agnhost porter"), strings.Count(string(in), "agnhost porter")-removed; got != want {
		t.Errorf("%d porter containers left, want %d", got, want)
	}
}
