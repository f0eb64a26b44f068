package sandbox

import (
	"strings"
	"testing"
)

func TestWithoutAgentDaemonSet(t *testing.T) {
	in := `apiVersion: v1
kind: ConfigMap
metadata:
  name: kovs-config
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kovs-agent
  namespace: kube-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kovs-controller
  namespace: kube-system
`
	out, err := withoutAgentDaemonSet(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "kind: DaemonSet") || !strings.Contains(out, "kind: ConfigMap") || !strings.Contains(out, "name: kovs-controller") {
		t.Fatalf("want the ConfigMap and the Deployment without the DaemonSet, got:\n%s", out)
	}
	if _, err := withoutAgentDaemonSet(strings.Replace(in, "kind: DaemonSet", "kind: Deployment", 1)); err == nil {
		t.Fatal("a dist/ without the agent DaemonSet was accepted")
	}
}
