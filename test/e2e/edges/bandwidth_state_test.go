package edges_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kovs-net/kovs/go-controller/pkg/bandwidth"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// checkBandwidthState follows the limited pods of checkBandwidth through what operators
// do: node1's kovs-agent restarts and its ovs-vswitchd restarts (every meter and flow
// lost) and both come back to the same meters, used by the pods' flows; removing an
// annotation removes the meter and its use; an unusable value limits nothing and gets a
// Warning Event naming it; deleting the pod deletes its meter.
func (c *edges) checkBandwidthState(t *testing.T) {
	want := c.s.DumpMeters(t, "node1")
	if len(want) != 2 {
		t.Fatalf("node1's meters: %v, want the egress-limited pod's and the ingress-limited pod's", want)
	}
	c.waitMetered(t, want)
	for _, process := range []string{"node1-kovs-agent", "node1-ovs-vswitchd"} {
		start := time.Now()
		if _, err := c.s.Layout.Restart(process); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(process, "kovs-agent") {
			framework.Eventually(t, 60*time.Second, "kovs-agent on node1 ready", func() error {
				st, err := os.Stat(c.s.Layout.CNIConfDir("node1") + "/10-kovs.conflist")
				if err != nil || !st.ModTime().After(start) {
					return fmt.Errorf("CNI config not rewritten yet (%v)", err)
				}
				return nil
			})
		}
		c.waitMetered(t, want)
		t.Logf("bandwidth: after restarting %s, node1 has the same meters, used by the pods' flows, in %s",
			process, time.Since(start).Round(time.Millisecond))
	}
	c.annotate(t, "egress-limited", bandwidth.EgressAnnotation, nil)
	c.waitMetered(t, want[1:])
	bad := "10Mbit"
	c.annotate(t, "ingress-limited", bandwidth.IngressAnnotation, &bad)
	c.waitMetered(t, nil)
	framework.Eventually(t, 30*time.Second, "an InvalidBandwidth Event on x/ingress-limited", func() error {
		events, err := c.s.Client.CoreV1().Events("x").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=ingress-limited,reason=InvalidBandwidth"})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, bandwidth.IngressAnnotation) && strings.Contains(e.Message, `"10Mbit"`) {
				t.Logf("bandwidth: Event %s: %s", e.Reason, e.Message)
				return nil
			}
		}
		return fmt.Errorf("events: %v", events.Items)
	})
	good := "20M"
	c.annotate(t, "ingress-limited", bandwidth.IngressAnnotation, &good)
	framework.Eventually(t, 10*time.Second, "the ingress meter back at 20 Mbit/s", func() error {
		if m, err := c.s.ListMeters("node1"); err != nil || len(m) != 1 || m[0].RateKbps != 20_000 {
			return fmt.Errorf("meters %v (%v)", m, err)
		}
		return nil
	})
	for _, name := range []string{"egress-limited", "ingress-limited"} {
		c.s.DeletePod(t, "x", name, podTimeout)
	}
	c.waitMetered(t, nil)
}

// waitMetered waits until node1's meters are want and the pods' flows use exactly them.
func (c *edges) waitMetered(t *testing.T, want []ovs.Meter) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("node1's meters %v, used by flows", want), func() error {
		have, err := c.s.ListMeters("node1")
		if err != nil {
			return err
		}
		if !slices.Equal(have, want) {
			return fmt.Errorf("meters %v", have)
		}
		used := 0
		flows, err := c.s.ListFlows("node1")
		if err != nil {
			return err
		}
		for _, f := range flows {
			if strings.Contains(f.Text, "meter:") {
				used++
			}
		}
		if used != len(want) {
			return fmt.Errorf("%d flows use a meter, want %d", used, len(want))
		}
		return nil
	})
}

// annotate sets (value nil: removes) an annotation of the pod x/name.
func (c *edges) annotate(t *testing.T, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = `"` + *value + `"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if _, err := c.s.Client.CoreV1().Pods("x").Patch(context.Background(), name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate x/%s %s=%s: %v", name, key, v, err)
	}
}
