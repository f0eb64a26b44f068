package policybench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

const (
	nodes = 3
	// probeNamespace holds the targets (role=target, one per node), the probers
	// (role=prober, one per node) and the sample policies; no background policy is there.
	probeNamespace = "pb-probe"
	// backgroundNamespaces hold 6 pods each (groups app=g0..g2 of 2 pods, on two nodes)
	// and the background policies.
	backgroundNamespaces = 4
	podsPerBackground    = 6
	groups               = 3
	// benchLabel marks this benchmark's namespaces ("background" or "probe") and the
	// background policies.
	benchLabel = "kovs.io/policybench"

	podTimeout      = 90 * time.Second
	realizeTimeout  = 10 * time.Minute
	createWorkers   = 8
	realizedPolling = time.Second
)

// cluster is the sandbox with the benchmark's 30 pods: 3 targets, 3 probers and 24
// background pods.
type cluster struct {
	s *framework.Sandbox
	// targets[i] runs on node i+1; probers[i] on the next node, probing targets[i].
	targets, probers []*corev1.Pod
	background       int // background policies created
	seq              int // sample policies created
	realized         *realizationWatch
}

func nodeName(i int) string { return fmt.Sprintf("node%d", i%nodes+1) }

func backgroundNamespace(i int) string { return fmt.Sprintf("pb-bg-%d", i) }

func newCluster(b *testing.B, s *framework.Sandbox) *cluster {
	c := &cluster{s: s}
	s.EnsureNamespace(b, probeNamespace, map[string]string{benchLabel: "probe"})
	for i := range backgroundNamespaces {
		s.EnsureNamespace(b, backgroundNamespace(i), map[string]string{benchLabel: "background"})
	}
	http := []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	for i := range nodes {
		s.CreatePod(b, framework.PodSpec{Namespace: probeNamespace, Name: "target-" + nodeName(i), Node: nodeName(i),
			Labels: map[string]string{"role": "target"}, Ports: http})
		s.CreatePod(b, framework.PodSpec{Namespace: probeNamespace, Name: "prober-" + nodeName(i+1), Node: nodeName(i + 1),
			Labels: map[string]string{"role": "prober"}, Ports: http})
	}
	var pending [][2]string
	for n := range backgroundNamespaces {
		for j := range podsPerBackground {
			name := fmt.Sprintf("bg-%d", j)
			s.CreatePod(b, framework.PodSpec{Namespace: backgroundNamespace(n), Name: name, Node: nodeName(n + j + j/groups),
				Labels: map[string]string{"app": fmt.Sprintf("g%d", j%groups)}, Ports: http})
			pending = append(pending, [2]string{backgroundNamespace(n), name})
		}
	}
	for i := range nodes {
		c.targets = append(c.targets, s.WaitRunning(b, probeNamespace, "target-"+nodeName(i), podTimeout))
		c.probers = append(c.probers, s.WaitRunning(b, probeNamespace, "prober-"+nodeName(i+1), podTimeout))
	}
	for _, p := range pending {
		s.WaitRunning(b, p[0], p[1], podTimeout)
	}
	c.watchRealizations(b)
	return c
}

// target is the address and identity of targets[i].
func (c *cluster) target(i int) (netip.Addr, string) {
	ips := framework.PodIPs(c.targets[i])
	return ips[0], c.targets[i].Namespace + "/" + c.targets[i].Name
}

// ensureBackground creates background policies up to n, in bulk, and waits until every
// one of them is realized on the nodes it concerns.
func (c *cluster) ensureBackground(b *testing.B, n int) {
	b.Helper()
	if c.background >= n {
		return
	}
	start := time.Now()
	err := framework.ForEach(c.background, n, createWorkers, func(i int) error {
		np := backgroundPolicy(i)
		_, err := c.s.Client.NetworkingV1().NetworkPolicies(np.Namespace).Create(context.Background(), np, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s/%s: %w", np.Namespace, np.Name, err)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	c.background = n
	framework.Eventually(b, realizeTimeout, fmt.Sprintf("%d background policies realized", n), c.backgroundRealized)
	b.Logf("%d background policies in place: created in %s, all realized after %s",
		n, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// backgroundRealized checks that every background policy reads complete on at least one
// node.
func (c *cluster) backgroundRealized() error {
	var total, done int
	var last string
	for n := range backgroundNamespaces {
		list, err := c.s.Client.NetworkingV1().NetworkPolicies(backgroundNamespace(n)).List(context.Background(),
			metav1.ListOptions{LabelSelector: benchLabel + "=background"})
		if err != nil {
			return err
		}
		for _, np := range list.Items {
			total++
			value := np.Annotations[realization.AnnotationKey]
			if st, err := realization.ParseStatus(value); err == nil && st.Complete() && st.Concerned > 0 {
				done++
			} else {
				last = np.Namespace + "/" + np.Name + ": " + value
			}
		}
	}
	if total != c.background || done != total {
		return fmt.Errorf("%d of %d policies (of %d created) realized; e.g. %q", done, total, c.background, last)
	}
	return nil
}

// backgroundPolicy is background policy i, in namespace pb-bg-<i%4>: it selects group
// g<(i/4)%3> (2 pods on 2 nodes) and allows ingress from the next group of the namespace
// and from any background namespace's g0 pods, on one of four port mixes (a range among
// them); every fifth also isolates egress and allows HTTPS to 10.0.0.0/8 except
// 10.0.5.0/24, and DNS anywhere.
func backgroundPolicy(i int) *networkingv1.NetworkPolicy {
	group := (i / backgroundNamespaces) % groups
	mixes := [][]networkingv1.NetworkPolicyPort{
		ports(tcp(80)),
		ports(tcp(8080), tcp(8443)),
		ports(udp(53), tcp(53)),
		{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(30000)), EndPort: ptr.To(int32(30099))}},
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: backgroundNamespace(i % backgroundNamespaces), Name: fmt.Sprintf("bg-%04d", i),
			Labels: map[string]string{benchLabel: "background"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("g%d", group)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("g%d", (group+1)%groups)}}},
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{benchLabel: "background"}},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "g0"}}},
				},
				Ports: mixes[i%len(mixes)],
			}},
		},
	}
	if i%5 == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.0.5.0/24"}}}},
				Ports: ports(tcp(443))},
			{Ports: ports(udp(53), tcp(53))},
		}
	}
	return np
}

func ports(p ...networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort { return p }

func tcp(port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}
}

func udp(port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(port))}
}

// realizationWatch follows the policies of the probe namespace (an informer: a watch
// "from now" on a quiet resource can fail while kube-apiserver's watch cache catches up)
// and tells when a policy's kovs.io/realization annotation first reads complete on every
// node.
type realizationWatch struct {
	mu      sync.Mutex
	waiting map[string]chan time.Time
	values  map[string]string // the last annotation seen, by policy name
}

func (c *cluster) watchRealizations(b *testing.B) {
	w := &realizationWatch{waiting: map[string]chan time.Time{}, values: map[string]string{}}
	factory := informers.NewSharedInformerFactoryWithOptions(c.s.Client, 0, informers.WithNamespace(probeNamespace))
	informer := factory.Networking().V1().NetworkPolicies().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.seen,
		UpdateFunc: func(_, obj any) { w.seen(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop); factory.Shutdown() })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		b.Fatal("NetworkPolicy informer did not sync")
	}
	c.realized = w
}

// expect returns a channel that receives the time policy name is first seen realized on
// every node.
func (w *realizationWatch) expect(name string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[name] = ch
	return ch
}

// last is the last annotation seen on policy name.
func (w *realizationWatch) last(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.values[name]
}

func (w *realizationWatch) seen(obj any) {
	at := time.Now()
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	value := np.Annotations[realization.AnnotationKey]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.values[np.Name] = value
	st, err := realization.ParseStatus(value)
	if ch, ok := w.waiting[np.Name]; ok && err == nil && st.Complete() && st.Concerned == nodes {
		ch <- at
		delete(w.waiting, np.Name)
	}
}

// agentLogSizes are the sizes of the nodes' kovs-agent logs, to read what they log after.
func (c *cluster) agentLogSizes() map[string]int64 {
	sizes := map[string]int64{}
	for i := range nodes {
		if fi, err := os.Stat(c.agentLog(nodeName(i))); err == nil {
			sizes[nodeName(i)] = fi.Size()
		}
	}
	return sizes
}

func (c *cluster) agentLog(node string) string {
	return c.s.Layout.LogFile(node + "-kovs-agent")
}

// tookField is the duration kovs-agent logs with every flow sync that changed flows.
var tookField = regexp.MustCompile(`\btook=(\S+)`)

// agentSyncs are the durations of the incremental flow syncs (desired flows, diff, one
// bundle) the agents logged since sizes, sorted.
func (c *cluster) agentSyncs(sizes map[string]int64) []time.Duration {
	var took []time.Duration
	for node, size := range sizes {
		f, err := os.Open(c.agentLog(node))
		if err != nil {
			continue
		}
		if _, err := f.Seek(size, io.SeekStart); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				line := sc.Text()
				if !strings.Contains(line, `msg="flows synced"`) || !strings.Contains(line, "full=false") {
					continue
				}
				if m := tookField.FindStringSubmatch(line); m != nil {
					if d, err := time.ParseDuration(m[1]); err == nil {
						took = append(took, d)
					}
				}
			}
		}
		f.Close()
	}
	slices.Sort(took)
	return took
}
