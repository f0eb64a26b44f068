package kovsctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/nodestatus"
)

// Uninstall records on the agent's DaemonSet namespace/name the operator's request to
// remove kovs from the nodes (nodestatus.UninstallAnnotation); withdraw takes it back.
// Nothing is removed yet: each agent cleans its node when the DaemonSet is then deleted
// (`kubectl delete -k dist/`). The pod template is not touched, so no agent restarts.
func (a Access) Uninstall(ctx context.Context, namespace, name string, withdraw bool, w io.Writer) error {
	var value any = "true"
	if withdraw {
		value = nil // a merge patch's null removes the key
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{nodestatus.UninstallAnnotation: value}}})
	if err != nil {
		return err
	}
	if _, err := a.Client.AppsV1().DaemonSets(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("uninstall: annotate DaemonSet %s/%s (--namespace, --daemonset): %w", namespace, name, err)
	}
	if withdraw {
		_, err = fmt.Fprintf(w, "DaemonSet %s/%s: uninstall request withdrawn; deleting it leaves the nodes as they are\n", namespace, name)
		return err
	}
	_, err = fmt.Fprintf(w, "DaemonSet %s/%s: uninstall requested (%s=true).\n"+
		"Now delete kovs (kubectl delete -k dist/): each agent then removes br-int (through OVS, which\n"+
		"waits for it), its nftables tables, the CNI config, socket and binary from its node.\n"+
		"kovsctl uninstall --withdraw takes the request back.\n",
		namespace, name, nodestatus.UninstallAnnotation)
	return err
}
