package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// flagValue is the value following flag in args ("" and false if absent).
func flagValue(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

func TestKubeProxyLeavesServicesToKubeProxyOnlyWhenAsked(t *testing.T) {
	l, _ := NewLayout("t", "/tmp")
	for _, withKubeProxy := range []bool{false, true} {
		u := &upRun{layout: l, opts: Options{KubeProxy: withKubeProxy}, state: &State{Family: IPv4}}
		got, ok := flagValue(u.agentArgs(Node{Name: "node1"}), "--service-proxy")
		if withKubeProxy && (!ok || got != "none") {
			t.Errorf("with kube-proxy the agent gets --service-proxy %q, want none: two proxies would claim the Services", got)
		}
		if !withKubeProxy && ok {
			t.Errorf("without kube-proxy the agent gets --service-proxy %q: nobody would serve Services", got)
		}
	}
}

func TestKubeProxyArgsKeepPodSourcesAndTheNodeNamespace(t *testing.T) {
	l, _ := NewLayout("t", "/tmp")
	for _, family := range []IPFamily{IPv4, IPv6, DualStack} {
		u := &upRun{layout: l, opts: Options{KubeProxy: true}, state: &State{Family: family}}
		args := u.kubeProxyArgs(Node{Name: "node2"})
		want := map[string]string{
			"--proxy-mode":        "nftables",
			"--hostname-override": "node2",
			// Without the pod CIDRs kube-proxy masquerades pod traffic, and the backends'
			// NetworkPolicy sees the node instead of the client.
			"--cluster-cidr":           strings.Join(clusterCIDRs[family], ","),
			"--kubeconfig":             l.NodeKubeconfig("node2"),
			"--conntrack-max-per-core": "0",
			"--healthz-bind-address":   "127.0.0.1:10256",
			"--metrics-bind-address":   "127.0.0.1:10249",
		}
		for flag, value := range want {
			if got, ok := flagValue(args, flag); !ok || got != value {
				t.Errorf("%s: kube-proxy %s %q, want %q", family, flag, got, value)
			}
		}
		if slices.Contains(args, "--masquerade-all") {
			t.Errorf("%s: kube-proxy runs with --masquerade-all", family)
		}
	}
}
