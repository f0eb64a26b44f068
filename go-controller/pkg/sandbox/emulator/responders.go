package emulator

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// serve starts a responder for the pod's ports inside a network namespace.
func (e *Emulator) serve(netnsPath string, ports []corev1.ContainerPort, identity string) (io.Closer, error) {
	want := make([]responder.Port, 0, len(ports))
	for _, p := range ports {
		proto, err := responder.ParseProtocol(string(p.Protocol))
		if err != nil {
			return nil, err
		}
		want = append(want, responder.Port{Number: uint16(p.ContainerPort), Protocol: proto})
	}
	var r *responder.Responder
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		r, err = responder.Serve(context.Background(), want, identity)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start responder for %s: %w", identity, err)
	}
	return r, nil
}

// closeResponders stops every responder (the emulator is exiting; pods keep their
// namespaces and attachments, which a restarted emulator adopts).
func (e *Emulator) closeResponders() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, sb := range e.sandboxes {
		if sb.responder != nil {
			_ = sb.responder.Close()
		}
	}
}

// garbageCollect removes what no live pod owns: CNI attachments (CNI GC with the valid
// list) and pod namespaces of this node whose pod is gone. The attachments of pods another
// runtime runs are valid while their Pod exists: they are that runtime's to remove.
func (e *Emulator) garbageCollect(ctx context.Context) {
	e.mu.Lock()
	valid := make([]Attachment, 0, len(e.sandboxes))
	owned := map[string]bool{}
	for _, sb := range e.sandboxes {
		if sb.attachment != nil {
			valid = append(valid, *sb.attachment)
			owned[sb.attachment.NetNSPath] = true
		}
	}
	e.mu.Unlock()
	pods, _ := e.pods.List(labels.Everything())
	for _, p := range pods {
		if ExternalRuntime(p) {
			valid = append(valid, PodAttachment(p, ""))
		}
	}
	if err := e.network.gc(ctx, valid); err != nil {
		e.log.WithError(err).Warn("CNI GC")
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, en := range entries {
		path := netnsPath(en.Name())
		if strings.HasPrefix(en.Name(), e.cfg.PodNetNSPrefix) && !owned[path] && !e.pending(path) {
			if err := deleteNetNS(path); err != nil {
				e.log.WithError(err).WithField("netns", en.Name()).Warn("delete stale pod namespace")
			} else {
				e.log.WithField("netns", en.Name()).Info("deleted stale pod namespace")
			}
		}
	}
}

// pending reports whether a namespace belongs to a pod that still exists (its sandbox may
// be being created right now).
func (e *Emulator) pending(path string) bool {
	pods, _ := e.pods.List(labels.Everything())
	for _, p := range pods {
		if netnsPath(e.cfg.PodNetNS(string(p.UID))) == path {
			return true
		}
	}
	return false
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
