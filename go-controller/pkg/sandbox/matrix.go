package sandbox

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox/responder"
)

// MatrixPod is one pod of a connectivity matrix.
type MatrixPod struct {
	Key   string // namespace/name
	Node  string
	NetNS string
	IPs   []netip.Addr
}

// MatrixCell is the outcome of one probe from a pod to another pod's address.
type MatrixCell struct {
	From, To string
	Target   responder.Target
	Result   responder.Result
}

// Matrix is every ordered pair of pods probed on one port.
type Matrix struct {
	Pods  []MatrixPod
	Cells map[string]map[string][]MatrixCell // from -> to -> one cell per address of To
}

// MatrixPods lists the running, non-hostNetwork pods of the given namespaces (all when
// none is given), sorted by key.
func (l Layout) MatrixPods(ctx context.Context, namespaces ...string) ([]MatrixPod, error) {
	client, err := l.Client()
	if err != nil {
		return nil, err
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var pods []MatrixPod
	for _, namespace := range namespaces {
		list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			if p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning {
				continue
			}
			mp := MatrixPod{Key: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, NetNS: l.PodNetNS(p.Spec.NodeName, string(p.UID))}
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil {
					mp.IPs = append(mp.IPs, a)
				}
			}
			pods = append(pods, mp)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Key < pods[j].Key })
	return pods, nil
}

// ProbeMatrix probes port from every pod to every address of every pod (itself included),
// a few probes at a time.
func ProbeMatrix(ctx context.Context, pods []MatrixPod, port responder.Port, timeout time.Duration) *Matrix {
	m := &Matrix{Pods: pods, Cells: map[string]map[string][]MatrixCell{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, from := range pods {
		m.Cells[from.Key] = map[string][]MatrixCell{}
		for _, to := range pods {
			for _, ip := range to.IPs {
				wg.Add(1)
				sem <- struct{}{}
				go func(from, to MatrixPod, target responder.Target) {
					defer wg.Done()
					defer func() { <-sem }()
					cell := MatrixCell{From: from.Key, To: to.Key, Target: target}
					err := ns.WithNetNSPath(NetNSPath(from.NetNS), func(ns.NetNS) error {
						cell.Result = responder.Probe(ctx, target, timeout)
						return nil
					})
					if err != nil {
						cell.Result.Error = err.Error()
					}
					mu.Lock()
					m.Cells[from.Key][to.Key] = append(m.Cells[from.Key][to.Key], cell)
					mu.Unlock()
				}(from, to, responder.Target{Addr: ip, Port: port})
			}
		}
	}
	wg.Wait()
	for _, row := range m.Cells {
		for _, cells := range row {
			sort.Slice(cells, func(i, j int) bool { return cells[i].Target.Addr.Less(cells[j].Target.Addr) })
		}
	}
	return m
}

// Print writes the matrix: one row per source pod, one column per destination pod; a
// cell shows the source address the destination saw, per destination address, or why the
// probe failed ("refused", "timeout").
func (m *Matrix) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"FROM \\ TO"}
	for _, p := range m.Pods {
		header = append(header, p.Key+" ("+p.Node+")")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, from := range m.Pods {
		row := []string{from.Key}
		for _, to := range m.Pods {
			var parts []string
			for _, c := range m.Cells[from.Key][to.Key] {
				parts = append(parts, cellText(c))
			}
			row = append(row, strings.Join(parts, " "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

func cellText(c MatrixCell) string {
	switch {
	case c.Result.Connected && c.Result.Reply != nil:
		return "ok:" + c.Result.Reply.Peer.Addr().String()
	case c.Result.Connected:
		return "ok"
	case c.Result.Refused:
		return "refused"
	}
	return "timeout"
}
