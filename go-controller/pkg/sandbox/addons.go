package sandbox

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterDomain is the DNS domain of the sandbox's real nodes.
const ClusterDomain = "cluster.local"

// CoreDNSImage is the cluster DNS image real nodes run (built by `make images`).
const CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.6"

//go:embed addons/coredns.yaml
var corednsManifest string

// ClusterDNSIP is the kube-dns Service's address: the tenth of the primary Service CIDR,
// as kubeadm picks it.
func (s *State) ClusterDNSIP() (netip.Addr, error) {
	p, err := netip.ParsePrefix(s.ServiceCIDRs[0])
	if err != nil {
		return netip.Addr{}, err
	}
	return nthAddr(p.Masked(), 10), nil
}

// installCoreDNS deploys the cluster DNS a kubeadm cluster has (kubelet's clusterDNS
// points at it) once the pod network works, and waits until it answers its readiness.
func (u *upRun) installCoreDNS() error {
	if u.opts.KovsBinDir == "" {
		return nil // no pod network: CoreDNS could not run
	}
	ip, err := u.state.ClusterDNSIP()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	t := template.Must(template.New("coredns").Parse(corednsManifest))
	if err := t.Execute(&b, map[string]string{"ClusterIP": ip.String(), "Image": CoreDNSImage, "Domain": ClusterDomain}); err != nil {
		return err
	}
	cmd := exec.CommandContext(u.ctx, filepath.Join(u.opts.K8sBinDir, "kubectl"), "--kubeconfig", u.layout.Kubeconfig(), "apply", "-f", "-")
	cmd.Stdin = &b
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply CoreDNS: %w\n%s", err, out)
	}
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	return waitFor(u.ctx, 3*time.Minute, "CoreDNS to be available", func() error {
		d, err := client.AppsV1().Deployments("kube-system").Get(u.ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentAvailable(d, len(u.state.Nodes))
	})
}

// kubeletDNS is the clusterDNS part of a real node's kubelet configuration.
func (u *upRun) kubeletDNS() string {
	ip, err := u.state.ClusterDNSIP()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("clusterDNS: [%s]\nclusterDomain: %s\n", ip, ClusterDomain)
}
