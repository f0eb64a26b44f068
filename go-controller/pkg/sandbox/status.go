package sandbox

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PrintStatus prints the sandbox's processes and, if kube-apiserver answers, its nodes.
func PrintStatus(ctx context.Context, l Layout, out io.Writer) error {
	s, err := l.LoadState()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sandbox %s (%s), kubeconfig %s, kube-apiserver %s\n\n", s.Name, s.Family, l.Kubeconfig(), s.APIServerURL())
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROCESS\tPID\tSTATE")
	names := l.processNames()
	sort.Strings(names)
	for _, n := range names {
		pid, state := l.pidOf(n), "running"
		if pid == 0 {
			state = "stopped"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", n, pid, state)
	}
	w.Flush()
	client, err := l.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(out, "\nkube-apiserver unreachable: %v\n", err)
		return nil
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDRESSES\tNETNS\tREADY\tMESSAGE")
	for _, n := range nodes.Items {
		ready, msg := nodeReady(&n)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Name, strings.Join(internalIPs(&n), ","), l.NodeNetNS(n.Name), ready, msg)
	}
	return w.Flush()
}

func nodeReady(n *corev1.Node) (corev1.ConditionStatus, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status, c.Message
		}
	}
	return corev1.ConditionUnknown, ""
}

func internalIPs(n *corev1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}
