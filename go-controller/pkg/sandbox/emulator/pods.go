package emulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// RuntimeAnnotation on a Pod names who runs its sandbox. Set to RuntimeExternal, the
// emulator leaves the pod entirely to another runtime (a benchmark that must timestamp CNI
// ADD itself, for instance): no network namespace, no CNI call, no status, no deletion
// handling. Its CNI attachment is still valid in the emulator's CNI GC, under the container
// ID PodAttachment gives, so the other runtime must use PodAttachment too.
const (
	RuntimeAnnotation = "sandbox.kovs.io/runtime"
	RuntimeExternal   = "external"
)

// ExternalRuntime reports whether another runtime than the emulator runs pod.
func ExternalRuntime(pod *corev1.Pod) bool {
	return pod.Annotations[RuntimeAnnotation] == RuntimeExternal
}

// podSandbox is what the emulator runs for one pod: its network attachment (none for
// hostNetwork pods), its IPs and its responder.
type podSandbox struct {
	uid        string
	attachment *Attachment
	ips        []string
	responder  io.Closer
}

// reconcile makes the node's view of one pod match the API: running pods get a sandbox,
// deleted or finished pods lose it.
func (e *Emulator) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := e.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return e.teardown(ctx, key)
	}
	if err != nil {
		return err
	}
	if ExternalRuntime(pod) {
		return nil
	}
	if sb := e.sandbox(key); sb != nil && sb.uid != string(pod.UID) {
		if err := e.teardown(ctx, key); err != nil {
			return err
		}
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if err := e.teardown(ctx, key); err != nil {
			return err
		}
		return e.finishDeletion(ctx, pod)
	}
	sb := e.sandbox(key)
	if sb == nil {
		if sb, err = e.startSandbox(ctx, pod); err != nil || sb == nil {
			return err
		}
	}
	return e.reportRunning(ctx, pod, sb)
}

// finishDeletion removes a terminating pod once its sandbox is gone, as kubelet does after
// its containers stopped.
func (e *Emulator) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	if pod.DeletionTimestamp == nil {
		return nil
	}
	err := e.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (e *Emulator) sandbox(key string) *podSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sandboxes[key]
}

// startSandbox creates the pod's network and responder. It returns (nil, nil) when the pod
// must wait for the network plugin; every failure undoes what was done.
func (e *Emulator) startSandbox(ctx context.Context, pod *corev1.Pod) (*podSandbox, error) {
	key := pod.Namespace + "/" + pod.Name
	ports := containerPorts(pod)
	if pod.Spec.HostNetwork {
		r, err := e.serve(e.cfg.NodeNetNSPath, ports, key)
		if err != nil {
			e.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedStart", "start responder in the node namespace: %v", err)
			return nil, err
		}
		return e.remember(key, &podSandbox{uid: string(pod.UID), ips: e.cfg.NodeIPs, responder: r}), nil
	}
	if _, err := e.network.ready(); err != nil {
		return nil, e.reportNetworkNotReady(ctx, pod, err)
	}
	att := PodAttachment(pod, netnsPath(e.cfg.PodNetNS(string(pod.UID))))
	if netnsExists(att.NetNSPath) {
		// A sandbox from before an emulator restart: recreate it, as kubelet recreates a
		// sandbox it lost track of.
		if err := e.network.Del(ctx, att); err != nil {
			return nil, fmt.Errorf("CNI DEL of the previous sandbox: %w", err)
		}
	}
	if err := createNetNS(att.NetNSPath); err != nil {
		return nil, err
	}
	success := false
	defer func() {
		if !success {
			_ = e.network.Del(context.WithoutCancel(ctx), att)
			_ = deleteNetNS(att.NetNSPath)
		}
	}()
	result, err := e.network.Add(ctx, att)
	if err != nil {
		e.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return nil, fmt.Errorf("CNI ADD: %w", err)
	}
	ips, err := resultIPs(result)
	if err != nil {
		return nil, err
	}
	r, err := e.serve(att.NetNSPath, ports, key)
	if err != nil {
		return nil, err
	}
	success = true
	e.log.WithField("pod", key).WithField("ips", ips).Info("pod sandbox ready")
	return e.remember(key, &podSandbox{uid: string(pod.UID), attachment: &att, ips: ips, responder: r}), nil
}

func (e *Emulator) remember(key string, sb *podSandbox) *podSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sandboxes[key] = sb
	return sb
}

// teardown stops the pod's responder, calls CNI DEL and deletes its namespace.
func (e *Emulator) teardown(ctx context.Context, key string) error {
	sb := e.sandbox(key)
	if sb == nil {
		return nil
	}
	if sb.responder != nil {
		_ = sb.responder.Close()
		sb.responder = nil
	}
	if a := sb.attachment; a != nil {
		if _, err := e.network.ready(); err == nil {
			if err := e.network.Del(ctx, *a); err != nil {
				return fmt.Errorf("CNI DEL of %s: %w", key, err)
			}
		}
		if err := deleteNetNS(a.NetNSPath); err != nil {
			return err
		}
	}
	e.mu.Lock()
	delete(e.sandboxes, key)
	e.mu.Unlock()
	e.log.WithField("pod", key).Info("pod sandbox removed")
	return nil
}

// PodAttachment is the attachment of pod's sandbox in the network namespace at netnsPath,
// as the emulator makes it: the container ID is derived from the pod UID.
func PodAttachment(pod *corev1.Pod, netnsPath string) Attachment {
	return Attachment{
		ContainerID:  containerID(pod.UID),
		NetNSPath:    netnsPath,
		Namespace:    pod.Namespace,
		Name:         pod.Name,
		UID:          string(pod.UID),
		PortMappings: PodPortMappings(pod),
	}
}

// containerID is the pod sandbox ID: stable for a pod UID, so a restarted emulator and the
// CNI plugin agree on it.
func containerID[T ~string](uid T) string {
	sum := sha256.Sum256([]byte("kovs-sandbox/" + string(uid)))
	return hex.EncodeToString(sum[:])
}

func resultIPs(r types.Result) ([]string, error) {
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("CNI result: %w", err)
	}
	var v4, v6 []string
	for _, ip := range res.IPs {
		if ip.Address.IP.To4() != nil {
			v4 = append(v4, ip.Address.IP.String())
		} else {
			v6 = append(v6, ip.Address.IP.String())
		}
	}
	ips := append(v4, v6...)
	if len(ips) == 0 {
		return nil, errors.New("CNI result has no IP addresses")
	}
	return ips, nil
}

// containerPorts is what the responder listens on: every declared containerPort, or TCP,
// UDP and SCTP on 80 and 81 when the pod declares none.
func containerPorts(pod *corev1.Pod) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
			ports = append(ports, p)
		}
	}
	if len(ports) > 0 {
		return ports
	}
	for _, n := range []int32{80, 81} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
			ports = append(ports, corev1.ContainerPort{ContainerPort: n, Protocol: proto})
		}
	}
	return ports
}

func netnsPath(name string) string { return "/run/netns/" + name }

func createNetNS(path string) error {
	name := strings.TrimPrefix(path, "/run/netns/")
	if err := deleteNetNS(path); err != nil {
		return err
	}
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	return run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
}

func netnsExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func deleteNetNS(path string) error {
	if !netnsExists(path) {
		return nil
	}
	return run("ip", "netns", "delete", strings.TrimPrefix(path, "/run/netns/"))
}
