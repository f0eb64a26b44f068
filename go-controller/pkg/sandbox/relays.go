package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/relay"
)

// RunRelays serves what a real node's processes and kube-apiserver need across namespaces
// until ctx ends: kube-apiserver on every node's own loopback (NodeAPIServerPort), for
// kubelet and the pods kovs installs (their kubeconfig and KUBERNETES_SERVICE_HOST point
// there), and kube-apiserver's egress proxy, which opens its connections into the cluster
// (kubelets, pods, Services) from the first node's namespace.
func RunRelays(ctx context.Context, l Layout) error {
	s, err := l.LoadState()
	if err != nil {
		return err
	}
	if len(s.Nodes) == 0 {
		return fmt.Errorf("sandbox %q has no nodes", l.Name)
	}
	errs := make(chan error, 2*len(s.Nodes)+2)
	for _, n := range s.Nodes {
		fwd := relay.Forward{Name: "kube-apiserver", Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(NodeAPIServerPort)),
			Target: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.APIServerPort))}
		go func() { errs <- fwd.Run(ctx, NetNSPath(l.NodeNetNS(n.Name))) }()
	}
	// kube-apiserver at node1's address, its advertised one: the endpoint of the
	// kubernetes Service, which pods (CoreDNS, the suites' clients) reach.
	apiPort := strconv.Itoa(s.APIServerPort)
	for _, ip := range s.Nodes[0].IPs {
		fwd := relay.Forward{Name: "kube-apiserver", Listen: net.JoinHostPort(ip, apiPort), Target: net.JoinHostPort("127.0.0.1", apiPort)}
		go func() { errs <- fwd.Run(ctx, NetNSPath(l.NodeNetNS(s.Nodes[0].Name))) }()
	}
	proxy := relay.EgressProxy{Socket: l.EgressSocket(), NetNSPath: NetNSPath(l.NodeNetNS(s.Nodes[0].Name))}
	go func() { errs <- proxy.Run(ctx) }()
	log.WithField("nodes", len(s.Nodes)).WithField("egress", proxy.Socket).Info("relays serving")
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// advertiseAddress is what kube-apiserver advertises as the kubernetes Service's endpoint.
// The emulator's pods never use the API, and 127.0.0.1 cannot be an endpoint (nor is it
// reconciled). A real node's pods do (CoreDNS, the upstream suites' clients): node1 is the
// control plane's node, as on a kubeadm cluster, and the relays serve kube-apiserver at
// node1's address and kube-apiserver's own port.
func (u *upRun) advertiseAddress() string {
	if ips := u.controlPlaneNodeIPs(); len(ips) > 0 {
		return ips[0].String()
	}
	return "127.0.0.1"
}

func (u *upRun) endpointReconciler() string {
	if u.opts.Runtime == RuntimeContainerd {
		return "lease"
	}
	return "none"
}

// controlPlaneNodeIPs are node1's addresses with real nodes (none with the emulator): the
// serving certificate must be valid for them.
func (u *upRun) controlPlaneNodeIPs() []net.IP {
	if u.opts.Runtime != RuntimeContainerd || len(u.state.Nodes) == 0 {
		return nil
	}
	var ips []net.IP
	for _, ip := range u.state.Nodes[0].IPs {
		ips = append(ips, net.ParseIP(ip))
	}
	return ips
}

// egressSelectorConfig is kube-apiserver's EgressSelectorConfiguration: every connection
// into the cluster goes through the egress proxy's unix socket (HTTP CONNECT).
func (l Layout) egressSelectorConfig() string {
	return `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: ` + l.EgressSocket() + `
`
}

// realNodeAPIServerArgs are kube-apiserver's flags for real nodes: its client certificate
// towards the kubelets, NodeRestriction (each kubelet may change only its own Node and
// its pods), and the egress proxy for connections into the cluster.
func (u *upRun) realNodeAPIServerArgs() ([]string, error) {
	l, pki := u.layout, u.layout.PKIDir()
	cfg := filepath.Join(l.Dir(), "egress-selector.yaml")
	if err := os.WriteFile(cfg, []byte(l.egressSelectorConfig()), 0o644); err != nil {
		return nil, err
	}
	return []string{
		"--kubelet-client-certificate", filepath.Join(pki, kubeletClientCert),
		"--kubelet-client-key", filepath.Join(pki, kubeletClientKey),
		"--enable-admission-plugins", "NodeRestriction",
		// As kubeadm: a node name resolves nowhere here.
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--egress-selector-config-file", cfg,
	}, nil
}
