package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/emulator"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/relay"
	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// RunNodeEmulator runs the emulator of one node of the sandbox until ctx ends.
func RunNodeEmulator(ctx context.Context, l Layout, node string) error {
	s, err := l.LoadState()
	if err != nil {
		return err
	}
	n, ok := s.Node(node)
	if !ok {
		return fmt.Errorf("sandbox %q has no node %q", l.Name, node)
	}
	client, err := l.Client()
	if err != nil {
		return err
	}
	cfg := emulator.Config{
		NodeName:       n.Name,
		NodeIPs:        n.IPs,
		Zone:           n.Zone,
		NodeNetNSPath:  NetNSPath(l.NodeNetNS(n.Name)),
		PodNetNS:       func(uid string) string { return l.PodNetNS(n.Name, uid) },
		PodNetNSPrefix: l.PodNetNSPrefix(n.Name),
		CNIConfDir:     l.CNIConfDir(n.Name),
		CNIBinDir:      l.CNIBinDir(n.Name),
		CNICacheDir:    l.CNICacheDir(n.Name),
		Forwards:       nodeForwards(s),
	}
	return emulator.New(cfg, client).Run(ctx)
}

// nodeForwards are the servers of the root namespace's loopback a node reaches on its own
// loopback: kube-apiserver on NodeAPIServerPort and kovs-controller's policy stream on
// NodeControllerPort.
func nodeForwards(s *State) []relay.Forward {
	loopback := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	fwds := []relay.Forward{{Name: "kube-apiserver", Listen: loopback(NodeAPIServerPort), Target: loopback(s.APIServerPort)}}
	if s.ControllerPort != 0 {
		fwds = append(fwds, relay.Forward{Name: "kovs-controller", Listen: loopback(NodeControllerPort), Target: loopback(s.ControllerPort)})
	}
	return fwds
}

// PodNetNS returns the network namespace a pod runs in: its own, or its node's for a
// hostNetwork pod. key is namespace/name.
func (l Layout) PodNetNSOf(ctx context.Context, key string) (string, error) {
	namespace, name, ok := strings.Cut(key, "/")
	if !ok || namespace == "" || name == "" {
		return "", fmt.Errorf("pod %q: write it as NAMESPACE/NAME", key)
	}
	client, err := l.Client()
	if err != nil {
		return "", err
	}
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", key, err)
	}
	if pod.Spec.NodeName == "" {
		return "", fmt.Errorf("pod %s is not scheduled to a node yet", key)
	}
	nsName := l.NodeNetNS(pod.Spec.NodeName)
	if !pod.Spec.HostNetwork {
		nsName = l.PodNetNS(pod.Spec.NodeName, string(pod.UID))
	}
	if _, err := os.Stat(NetNSPath(nsName)); err != nil {
		return "", fmt.Errorf("pod %s has no network namespace on %s (phase %s): %s", key, pod.Spec.NodeName, pod.Status.Phase, podWhy(pod))
	}
	return nsName, nil
}

func podWhy(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return "its sandbox has not been created"
}

// Exec replaces the current process with cmd run inside the pod's network namespace.
func (l Layout) Exec(ctx context.Context, key string, cmd []string) error {
	if len(cmd) == 0 {
		return fmt.Errorf("exec %s: no command given (kovs-sandbox exec NS/POD -- CMD...)", key)
	}
	nsName, err := l.PodNetNSOf(ctx, key)
	if err != nil {
		return err
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return err
	}
	return syscall.Exec(ip, append([]string{"ip", "netns", "exec", nsName}, cmd...), os.Environ())
}

// Probe connects from inside the pod to target (HOST:PORT/PROTO).
func (l Layout) Probe(ctx context.Context, key, target string, timeout time.Duration) (responder.Result, error) {
	t, err := responder.ParseTarget(target)
	if err != nil {
		return responder.Result{}, err
	}
	nsName, err := l.PodNetNSOf(ctx, key)
	if err != nil {
		return responder.Result{}, err
	}
	var res responder.Result
	err = ns.WithNetNSPath(NetNSPath(nsName), func(ns.NetNS) error {
		res = responder.Probe(ctx, t, timeout)
		return nil
	})
	return res, err
}
