package agent

import (
	"context"
	"net/netip"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// podNames finds the pod ("namespace/name") of an address in an audit line: a local pod
// from the node's state; another node's from the API (a field selector on status.podIP),
// remembered for a while, so a flood from one pod costs one lookup.
type podNames struct {
	a     *Agent
	mu    sync.Mutex
	cache map[netip.Addr]podName
}

type podName struct {
	name    string
	expires time.Time
}

const (
	podNameTTL   = 30 * time.Second
	noPodNameTTL = 5 * time.Second
)

func newPodNames(a *Agent) *podNames { return &podNames{a: a, cache: map[netip.Addr]podName{}} }

func (n *podNames) of(ctx context.Context, ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	if p, ok := n.a.state.podByIP(ip); ok {
		return p.Namespace + "/" + p.Name
	}
	now := time.Now()
	n.mu.Lock()
	c, ok := n.cache[ip]
	n.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.name
	}
	name, ttl := n.lookup(ctx, ip), podNameTTL
	if name == "" {
		ttl = noPodNameTTL
	}
	n.mu.Lock()
	if len(n.cache) > 10000 {
		n.cache = map[netip.Addr]podName{}
	}
	n.cache[ip] = podName{name: name, expires: now.Add(ttl)}
	n.mu.Unlock()
	return name
}

func (n *podNames) lookup(ctx context.Context, ip netip.Addr) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	list, err := n.a.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("status.podIP", ip.String()).String()})
	if err != nil {
		log.WithError(err).WithField("ip", ip).Debug("audit log: pod of an address")
		return ""
	}
	for _, p := range list.Items {
		if !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return p.Namespace + "/" + p.Name
		}
	}
	return ""
}
