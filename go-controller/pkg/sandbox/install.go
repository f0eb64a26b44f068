package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The objects dist/ creates that the install waits for.
const (
	kovsNamespace = "kube-system"
	kovsAgentDS   = "kovs-agent"
	kovsOVSDS     = "kovs-ovs"
	// The controller's Deployment has the binary's name (kovsController).
)

// InstallDir is the kustomization the sandbox installs kovs with: dist/ as operators apply
// it, plus what the sandbox's nodes differ in (installOverlay).
func (l Layout) InstallDir() string { return filepath.Join(l.Dir(), "kovs-install") }

// installOverlay is the sandbox's kustomization over dist/:
//   - the cluster CIDRs of the sandbox's IP family, the userspace datapath, and br-ex as
//     the uplink bridge (the tunnel endpoint is an address of that OVS bridge);
//   - kube-apiserver at the node's own loopback (the relays serve it there): the agents
//     and controllers run on the host network before any Service proxy works, the case
//     the optional ConfigMap kovs-kube-apiserver exists for.
//
// Nothing of dist/ is removed: Open vSwitch runs in dist's kovs-ovs DaemonSet, and the
// sandbox gives each node its br-ex once it runs (uplinkBridges).
func (l Layout) installOverlay(distRel string, family IPFamily, noMasquerade []string, nodePodCIDRs bool) map[string]string {
	return map[string]string{
		"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
# kovs as dist/ ships it, adapted to the sandbox's nodes (written by kovs-sandbox up).
resources:
  - ` + distRel + `
  - kube-apiserver.yaml
patches:
  - path: config.yaml
`,
		"config.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: kovs-config, namespace: kube-system}
data:
  cluster-cidrs: "` + strings.Join(clusterCIDRs[family], ",") + `"
  datapath-type: netdev
  uplink-bridge: ` + UplinkBridge + `
  no-masquerade-cidrs: "` + strings.Join(noMasquerade, ",") + `"
  use-node-pod-cidrs: "` + strconv.FormatBool(nodePodCIDRs) + `"
`,
		"kube-apiserver.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: kovs-kube-apiserver, namespace: kube-system}
data:
  KUBERNETES_SERVICE_HOST: "127.0.0.1"
  KUBERNETES_SERVICE_PORT: "` + strconv.Itoa(NodeAPIServerPort) + `"
`,
	}
}

// writeInstallOverlay writes the kustomization over the dist/ directory.
func (u *upRun) writeInstallOverlay() error {
	dir := u.layout.InstallDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dist, err := filepath.Abs(u.opts.DistDir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, dist)
	if err != nil {
		return err
	}
	for name, content := range u.layout.installOverlay(rel, u.state.Family, u.opts.NoMasqueradeCIDRs, u.state.NodePodCIDRs) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// installKovs installs kovs the way an operator does, `kubectl apply -k` of dist/ through
// the sandbox's overlay, gives every node its br-ex once OVS runs there, and waits until
// kovs runs: OVS and the agent on every node, the controller's replicas available, and
// every node Ready (kubelet reports Ready once
// kovs's conflist is in the node's /etc/cni/net.d).
func (u *upRun) installKovs() error {
	if u.opts.KovsBinDir == "" {
		fmt.Fprintln(u.opts.Out, "--network none: kovs is not installed; nodes stay NotReady")
		return nil
	}
	if err := u.writeInstallOverlay(); err != nil {
		return err
	}
	start := time.Now()
	if out, err := u.kubectl("apply", "-k", u.layout.InstallDir()); err != nil {
		return fmt.Errorf("kubectl apply -k %s: %w\n%s", u.layout.InstallDir(), err, out)
	}
	if err := u.uplinkBridges(); err != nil {
		return err
	}
	if err := u.waitKovsRunning(); err != nil {
		return err
	}
	fmt.Fprintf(u.opts.Out, "kovs installed: every node Ready %.1fs after kubectl apply -k\n", time.Since(start).Seconds())
	return nil
}

func (u *upRun) kubectl(args ...string) (string, error) {
	cmd := exec.CommandContext(u.ctx, filepath.Join(u.opts.K8sBinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+u.layout.Kubeconfig())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitKovsRunning waits for the agent DaemonSet, the controller Deployment and every
// node; a timeout names what is missing.
func (u *upRun) waitKovsRunning() error {
	client, err := u.layout.Client()
	if err != nil {
		return err
	}
	ctx := u.ctx
	return waitFor(ctx, 5*time.Minute, "kovs to run on every node and every node to be Ready", func() error {
		for _, n := range u.state.Nodes {
			if !u.layout.Running(KubeletProcess(n.Name)) {
				return permanent(u.withLog(fmt.Errorf("%s exited", KubeletProcess(n.Name)), KubeletProcess(n.Name)))
			}
		}
		// The agent's DaemonSet, and OVS's where the installed dist/ has one (dist/ as
		// shipped does; a dist/ of before 2026-12-05 ran OVS in the agent's pod).
		dss, err := client.AppsV1().DaemonSets(kovsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app in (" + kovsAgentDS + "," + kovsOVSDS + ")"})
		if err != nil {
			return err
		}
		agent := false
		for i := range dss.Items {
			agent = agent || dss.Items[i].Name == kovsAgentDS
			if err := daemonSetReady(&dss.Items[i], len(u.state.Nodes)); err != nil {
				return err
			}
		}
		if !agent {
			return fmt.Errorf("no DaemonSet %s/%s yet", kovsNamespace, kovsAgentDS)
		}
		dep, err := client.AppsV1().Deployments(kovsNamespace).Get(ctx, kovsController, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := deploymentAvailable(dep, len(u.state.Nodes)); err != nil {
			return err
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if ready, msg := nodeReady(&n); ready != corev1.ConditionTrue {
				return fmt.Errorf("node %s not Ready: %s", n.Name, msg)
			}
		}
		return nil
	})
}

func daemonSetReady(ds *appsv1.DaemonSet, nodes int) error {
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || int(st.DesiredNumberScheduled) != nodes ||
		st.NumberReady != st.DesiredNumberScheduled || st.UpdatedNumberScheduled != st.DesiredNumberScheduled {
		return fmt.Errorf("DaemonSet %s/%s: %d of %d nodes scheduled, %d ready, %d updated", ds.Namespace, ds.Name,
			st.DesiredNumberScheduled, nodes, st.NumberReady, st.UpdatedNumberScheduled)
	}
	return nil
}

// deploymentAvailable: every replica that fits is available. The controller runs on the
// host network, so its ports keep two replicas off one node: with fewer nodes than
// replicas the rest stay Pending.
func deploymentAvailable(d *appsv1.Deployment, nodes int) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = min(*d.Spec.Replicas, int32(nodes))
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.AvailableReplicas < want || st.UpdatedReplicas < want {
		return fmt.Errorf("Deployment %s/%s: %d of %d replicas available, %d updated", d.Namespace, d.Name,
			st.AvailableReplicas, want, st.UpdatedReplicas)
	}
	return nil
}
