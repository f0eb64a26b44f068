package netpol_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// cleanTimeout bounds how long the agents may take to drop every policy flow after the
// reset deleted the policies.
const cleanTimeout = 30 * time.Second

// reset returns the cluster to the standard model after a case: every NetworkPolicy and
// the case's extras deleted, labels restored. It then checks that it did: no policy
// left in the API, every label as the model has it, no NetworkPolicy state left on any
// agent (no rule in its share, no policy flow on its switch), and every pod reaching every
// pod on every port it serves. Anything else breaks the cluster for the next cases: the
// run stops there, loudly.
func (m *modelCluster) reset(t *testing.T, c Case) {
	m.broken = "the reset after " + c.Name + " did not finish"
	start := time.Now()
	defer func() { t.Logf("reset in %s", time.Since(start).Round(time.Millisecond)) }()
	var errs []error
	for _, ns := range append(append([]string{}, m.namespaces...), barrierNamespace) {
		if err := m.s.Client.NetworkingV1().NetworkPolicies(ns).DeleteCollection(context.Background(),
			metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("delete the policies of %s: %w", ns, err))
		}
	}
	for _, p := range casePods(c)[len(m.pods):] {
		m.s.DeletePod(t, p.Namespace, p.Name, 60*time.Second)
	}
	errs = append(errs, m.deleteNamespaces(sortedKeysOf(c.ExtraNamespaces))...)
	m.namespaces = modelNamespaces
	for _, p := range standardPods() {
		m.perform(t, write{podLabels: p.Key(), labels: p.Labels})
	}
	for _, ns := range modelNamespaces {
		m.perform(t, write{nsLabels: ns, labels: map[string]string{"ns": ns}})
	}
	errs = append(errs, m.checkStandard(), m.checkNoPolicyState())
	// The flows are gone from the switches; one more full resync on every node means the
	// syncs that removed them have finished what follows a policy change (the datapath
	// cache invalidation) before the probes.
	m.waitFullResyncs(t, m.fullResyncs(t), 1)
	if err := errors.Join(append(errs, m.checkAllAllowed(t))...); err != nil {
		m.broken = "the reset after " + c.Name + " failed"
		t.Errorf("%s:\n%v", m.broken, err)
		return
	}
	m.broken = ""
}

// deleteNamespaces deletes namespaces and waits until they are gone.
func (m *modelCluster) deleteNamespaces(names []string) []error {
	ctx := context.Background()
	var errs []error
	for _, ns := range names {
		if err := m.s.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", ns, err))
		}
	}
	for _, ns := range names {
		err := pollUntil(60*time.Second, 100*time.Millisecond, func() error {
			_, err := m.s.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("still there")
			}
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s not deleted: %w", ns, err))
		}
	}
	return errs
}

// checkStandard checks the API holds the standard model: no policy, the model's labels.
func (m *modelCluster) checkStandard() error {
	ctx := context.Background()
	var errs []error
	for _, ns := range append(append([]string{}, modelNamespaces...), barrierNamespace) {
		nps, err := m.policiesIn(ns)
		if err != nil {
			errs = append(errs, err)
		}
		for _, np := range nps {
			errs = append(errs, fmt.Errorf("policy %s/%s still exists", np.Namespace, np.Name))
		}
	}
	for _, p := range standardPods() {
		got, err := m.s.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && !maps.Equal(got.Labels, p.Labels) {
			err = fmt.Errorf("labels %v, want %v", got.Labels, p.Labels)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Key(), err))
		}
	}
	for _, ns := range modelNamespaces {
		want := map[string]string{"ns": ns, "kubernetes.io/metadata.name": ns}
		got, err := m.s.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil && !maps.Equal(got.Labels, want) {
			err = fmt.Errorf("labels %v, want %v", got.Labels, want)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}

// checkNoPolicyState waits until no agent holds a NetworkPolicy rule and no switch a
// NetworkPolicy flow.
func (m *modelCluster) checkNoPolicyState() error {
	st, err := m.s.Layout.LoadState()
	if err != nil {
		return err
	}
	return pollUntil(cleanTimeout, 200*time.Millisecond, func() error {
		var left []string
		for _, n := range st.Nodes {
			ps, err := m.s.AgentPolicyStatus(n.Name)
			if err != nil {
				return err
			}
			if ps.Rules > 0 {
				left = append(left, fmt.Sprintf("%s: the agent's share holds %d rules", n.Name, ps.Rules))
			}
			flows, err := m.s.ListFlows(n.Name)
			if err != nil {
				return err
			}
			for _, f := range flows {
				if pipeline.Cookie(f.Cookie).Category() == pipeline.CategoryPolicy {
					left = append(left, fmt.Sprintf("%s: policy flow %s", n.Name, f.Text))
				}
			}
		}
		if len(left) > 0 {
			if len(left) > 10 {
				left = append(left[:10], fmt.Sprintf("... %d more", len(left)-10))
			}
			return fmt.Errorf("NetworkPolicy state left after %s:\n  %s", cleanTimeout, strings.Join(left, "\n  "))
		}
		return nil
	})
}

// checkAllAllowed probes every ordered pair of the standard pods on every port they serve,
// over every family, once: with no policy, each must connect.
func (m *modelCluster) checkAllAllowed(t *testing.T) error {
	targets, byKey := m.targets(m.pods)
	cells := cellsOf(probePortsOf(m.pods[0]), m.families, targets)
	want := make(map[cellKey]bool, len(cells))
	for _, c := range cells {
		want[c] = true
	}
	got := m.probe(t, cells, byKey)
	if bad := got.mismatches(want); len(bad) > 0 {
		return fmt.Errorf("with no policy, %d of %d cells are not allowed:\n%s", len(bad), len(cells), got.render(want, keysOf(m.pods)))
	}
	return nil
}
