package kovsctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/realization"
)

// Policies prints every NetworkPolicy of a namespace (all when empty) with how far kovs
// enforces it: on how many of the nodes it concerns, as kovs-controller recorded it.
func (a Access) Policies(ctx context.Context, namespace string, w io.Writer) error {
	list, err := a.Client.NetworkingV1().NetworkPolicies(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		x, y := list.Items[i], list.Items[j]
		return x.Namespace+"/"+x.Name < y.Namespace+"/"+y.Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tENFORCED\tNODES\tGENERATION")
	for _, np := range list.Items {
		state, nodes, gen := "unknown (no status from kovs-controller yet)", "-", "-"
		if st, err := realization.ParseStatus(np.Annotations[realization.AnnotationKey]); err == nil {
			switch {
			case st.Concerned == 0:
				state = "selects no pod"
			case st.Complete():
				state = "yes"
			default:
				state = "in progress"
			}
			nodes, gen = fmt.Sprintf("%d/%d", st.Realized, st.Concerned), fmt.Sprint(st.Generation)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", np.Namespace, np.Name, state, nodes, gen)
	}
	return tw.Flush()
}
