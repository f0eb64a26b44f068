package sandbox

import (
	"slices"
	"testing"
)

// TestScaleControlPlaneIsTrimmed: the scale mode starts kube-controller-manager with its
// few controllers and no kube-scheduler; every other sandbox keeps both, with every
// default controller.
func TestScaleControlPlaneIsTrimmed(t *testing.T) {
	names := func(ps []Process) []string {
		var n []string
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return n
	}
	controllers := func(p Process) string {
		v, _ := flagValue(p.Args, "--controllers")
		return v
	}
	normal := &upRun{opts: Options{}, state: &State{}}
	if got := names(normal.controlPlaneControllers()); !slices.Equal(got, []string{"kube-controller-manager", "kube-scheduler"}) {
		t.Errorf("the sandbox starts %v", got)
	}
	if got := controllers(normal.controllerManager()); got != "*" {
		t.Errorf("the sandbox's kube-controller-manager runs --controllers %q, want *", got)
	}
	scale := &upRun{opts: Options{ControlPlaneOnly: true}, state: &State{}}
	if got := names(scale.controlPlaneControllers()); !slices.Equal(got, []string{"kube-controller-manager"}) {
		t.Errorf("the scale mode starts %v, want kube-controller-manager alone", got)
	}
	if got := controllers(scale.controllerManager()); got != "serviceaccount-controller" {
		t.Errorf("the scale mode's kube-controller-manager runs --controllers %q", got)
	}
	scale.state.NodePodCIDRs = true
	if got := controllers(scale.controllerManager()); got != "serviceaccount-controller,node-ipam-controller" {
		t.Errorf("with node pod CIDRs the scale mode's kube-controller-manager runs --controllers %q", got)
	}
}
