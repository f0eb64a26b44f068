package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NodeAPIServerPort is where each node's forwarder listens on the node's own loopback: the
// node namespace cannot reach the root namespace's loopback, where kube-apiserver listens.
const NodeAPIServerPort = 6443

// controlPlane starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
// loopback and waits until the cluster accepts Pods (the default ServiceAccount exists).
func (u *upRun) controlPlane(ctx context.Context) error {
	s, l := u.state, u.layout
	pki := l.PKIDir()
	if err := writePKI(pki, append(firstServiceIPs(s.ServiceCIDRs), u.controlPlaneNodeIPs()...)); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}
	if err := writeKubeconfig(l.Kubeconfig(), s.APIServerURL(), pki); err != nil {
		return err
	}
	if err := u.startEtcd(); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Second, "etcd to answer on its client port", func() error {
		return dialOK(s.EtcdPort)
	}); err != nil {
		return u.withLog(err, "etcd")
	}
	apiserver := u.apiserver()
	if u.opts.Runtime == RuntimeContainerd {
		extra, err := u.realNodeAPIServerArgs()
		if err != nil {
			return err
		}
		apiserver.Args = append(apiserver.Args, extra...)
	}
	audit, err := u.auditArgs()
	if err != nil {
		return err
	}
	apiserver.Args = append(apiserver.Args, audit...)
	if _, err := l.start(apiserver); err != nil {
		return err
	}
	client, err := l.Client()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 90*time.Second, "kube-apiserver /readyz", func() error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return u.withLog(err, "kube-apiserver")
	}
	for _, p := range u.controlPlaneControllers() {
		if _, err := l.start(p); err != nil {
			return err
		}
	}
	err = waitFor(ctx, 90*time.Second, "the default ServiceAccount (created by kube-controller-manager)", func() error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return u.withLog(err, "kube-controller-manager")
}

func (u *upRun) startEtcd() error {
	s, l := u.state, u.layout
	client := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPeerPort)
	args := []string{"--name", "kovs", "--data-dir", filepath.Join(l.Dir(), "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "kovs=" + peer, "--listen-metrics-urls", "",
		"--unsafe-no-fsync"}
	_, err := l.start(Process{Name: "etcd", Path: u.opts.EtcdPath, Args: args})
	return err
}

func (u *upRun) apiserver() Process {
	s, pki := u.state, u.layout.PKIDir()
	return Process{Name: "kube-apiserver", Path: filepath.Join(u.opts.K8sBinDir, "kube-apiserver"), Args: []string{
		"--etcd-servers", "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort),
		"--bind-address", "127.0.0.1", "--advertise-address", u.advertiseAddress(),
		"--secure-port", strconv.Itoa(s.APIServerPort),
		"--cert-dir", filepath.Join(u.layout.Dir(), "apiserver-certs"),
		"--tls-cert-file", filepath.Join(pki, apiserverCert), "--tls-private-key-file", filepath.Join(pki, apiserverKey),
		"--client-ca-file", filepath.Join(pki, caCert),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(pki, saPub),
		"--service-account-signing-key-file", filepath.Join(pki, saKey),
		"--service-cluster-ip-range", strings.Join(s.ServiceCIDRs, ","),
		"--authorization-mode", "Node,RBAC", "--allow-privileged",
		"--endpoint-reconciler-type", u.endpointReconciler(),
		"--profiling=false",
	}}
}

func (u *upRun) controllerManager() Process {
	s, pki := u.state, u.layout.PKIDir()
	p := Process{Name: "kube-controller-manager", Path: filepath.Join(u.opts.K8sBinDir, "kube-controller-manager"), Args: []string{
		"--kubeconfig", u.layout.Kubeconfig(), "--authentication-kubeconfig", u.layout.Kubeconfig(),
		"--authorization-kubeconfig", u.layout.Kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--leader-elect=false", "--controllers", strings.Join(u.kcmControllers(), ","),
		"--service-account-private-key-file", filepath.Join(pki, saKey),
		"--root-ca-file", filepath.Join(pki, caCert),
		"--use-service-account-credentials=false",
		"--service-cluster-ip-range", strings.Join(s.ServiceCIDRs, ","),
		"--profiling=false",
	}}
	if s.NodePodCIDRs {
		// The node blocks kovs would carve itself: /24 and /64 of the same cluster CIDRs.
		p.Args = append(p.Args, "--allocate-node-cidrs", "--cluster-cidr", strings.Join(s.ClusterCIDRs, ","),
			"--node-cidr-mask-size-ipv4", "24", "--node-cidr-mask-size-ipv6", "64")
	}
	return p
}

// controlPlaneControllers are the processes started after kube-apiserver: both
// controller processes, or in the scale mode kube-controller-manager alone (scale.go).
func (u *upRun) controlPlaneControllers() []Process {
	if u.opts.ControlPlaneOnly {
		return []Process{u.controllerManager()}
	}
	return []Process{u.controllerManager(), u.scheduler()}
}

// kcmControllers are kube-controller-manager's --controllers: every default one, or the
// scale mode's few (scaleControllers).
func (u *upRun) kcmControllers() []string {
	if u.opts.ControlPlaneOnly {
		return scaleControllers(u.state.NodePodCIDRs)
	}
	return []string{"*"}
}

func (u *upRun) scheduler() Process {
	return Process{Name: "kube-scheduler", Path: filepath.Join(u.opts.K8sBinDir, "kube-scheduler"), Args: []string{
		"--kubeconfig", u.layout.Kubeconfig(), "--authentication-kubeconfig", u.layout.Kubeconfig(),
		"--authorization-kubeconfig", u.layout.Kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false", "--profiling=false",
	}}
}

// withLog adds the tail of a process's log to a start-up error.
func (u *upRun) withLog(err error, process string) error {
	if err == nil {
		return nil
	}
	b, _ := os.ReadFile(u.layout.LogFile(process))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return fmt.Errorf("%w\n--- last lines of %s.log ---\n%s", err, process, strings.Join(lines, "\n"))
}

// writeKubeconfig writes an admin kubeconfig for server with the sandbox's CA and the
// admin client certificate embedded.
func writeKubeconfig(path, server, pki string) error {
	read := func(f string) []byte { b, _ := os.ReadFile(filepath.Join(pki, f)); return b }
	return writeKubeconfigFor(path, server, pki, "admin", read(adminCert), read(adminKey))
}

// writeKubeconfigFor writes a kubeconfig for server with the sandbox's CA and the given
// user's client certificate and key (PEM) embedded.
func writeKubeconfigFor(path, server, pki, user string, cert, key []byte) error {
	ca, err := os.ReadFile(filepath.Join(pki, caCert))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kovs-sandbox"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["kovs-sandbox"] = &clientcmdapi.Context{Cluster: "kovs-sandbox", AuthInfo: user}
	cfg.CurrentContext = "kovs-sandbox"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// Client returns a clientset for the sandbox's admin kubeconfig.
func (l Layout) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", l.Kubeconfig(), err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return kubernetes.NewForConfig(cfg)
}

func firstServiceIPs(cidrs []string) []net.IP {
	var ips []net.IP
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			continue
		}
		ip := append(net.IP(nil), n.IP...)
		ip[len(ip)-1]++
		ips = append(ips, ip)
	}
	return ips
}

func dialOK(port int) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// waitFor polls check until it succeeds, the timeout passes or ctx ends.
func waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		var stop permanentError
		if errors.As(last, &stop) {
			return stop.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitWhileRunning is waitFor for something the named process must do: waiting stops at
// once if the process exits, and a failure shows the end of its log.
func (u *upRun) waitWhileRunning(name string, timeout time.Duration, what string, check func() error) error {
	err := waitFor(u.ctx, timeout, what, func() error {
		if !u.layout.Running(name) {
			return permanent(fmt.Errorf("%s exited", name))
		}
		return check()
	})
	return u.withLog(err, name)
}

// permanentError ends waitFor at once: waiting longer cannot help.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }

func permanent(err error) error { return permanentError{err} }
