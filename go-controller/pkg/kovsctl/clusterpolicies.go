package kovsctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/clusterpolicy"
)

// ClusterPolicies prints every ClusterNetworkPolicy with its tier and priority, whether
// kovs enforces it (the kovs.io/Programmed condition kovs-controller writes) and, when
// kovs enforces it differently from what is written, what (kovs.io/Supported). Nothing
// when the API does not serve ClusterNetworkPolicy.
func (a Access) ClusterPolicies(ctx context.Context, w io.Writer) error {
	if a.PolicyAPI == nil {
		return nil
	}
	list, err := a.PolicyAPI.PolicyV1beta1().ClusterNetworkPolicies().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the CRD is not installed
	}
	if err != nil {
		return fmt.Errorf("list ClusterNetworkPolicies: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER POLICY\tTIER\tPRIORITY\tENFORCED\tAS WRITTEN")
	for _, p := range list.Items {
		enforced, written := "unknown (no status from kovs-controller yet)", "-"
		if c := meta.FindStatusCondition(p.Status.Conditions, clusterpolicy.ConditionProgrammed); c != nil {
			enforced = "yes: " + c.Message
			if c.Status != metav1.ConditionTrue {
				enforced = "no: " + c.Reason + ": " + c.Message
			}
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, clusterpolicy.ConditionSupported); c != nil {
			written = "yes"
			if c.Status != metav1.ConditionTrue {
				written = "no: " + c.Message
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", p.Name, p.Spec.Tier, p.Spec.Priority, enforced, written)
	}
	return tw.Flush()
}
