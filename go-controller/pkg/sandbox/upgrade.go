package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// UpgradeOptions configure Upgrade: the release kovs is upgraded to.
type UpgradeOptions struct {
	// ImagesDir holds the new release's image archives (its `make images`).
	ImagesDir string
	// DistDir is the new release's dist/.
	DistDir string
	// K8sBinDir holds kubectl.
	K8sBinDir string
	// NoMasqueradeCIDRs are the agents' --no-masquerade-cidrs, as given to up.
	NoMasqueradeCIDRs []string
	Out               io.Writer
}

// Upgrade moves the kovs of a real-node sandbox (up --runtime containerd) to another
// release the way docs/upgrades.md tells an operator to: the new images into every
// node's containerd, then the new dist/ through the sandbox's overlay, everything but the
// agent DaemonSet first (RBAC, ConfigMap, admission, the controller) and the controller's
// rollout waited, then the agents and their rollout. Pods keep running throughout.
func Upgrade(ctx context.Context, l Layout, opts UpgradeOptions) error {
	st, err := l.LoadState()
	if err != nil {
		return err
	}
	if st.Runtime != RuntimeContainerd {
		return fmt.Errorf("sandbox %q: upgrade needs real nodes (up --runtime containerd)", l.Name)
	}
	if _, err := os.Stat(filepath.Join(l.InstallDir(), "kustomization.yaml")); err != nil {
		return fmt.Errorf("sandbox %q: kovs was not installed (up --network none?): nothing to upgrade in %s", l.Name, l.InstallDir())
	}
	if _, err := os.Stat(filepath.Join(opts.DistDir, "kustomization.yaml")); err != nil {
		return fmt.Errorf("upgrade: %s has no kustomization.yaml (set --dist to the new release's dist/)", opts.DistDir)
	}
	archives, err := imageArchives(opts.ImagesDir)
	if err != nil {
		return err
	}
	if len(archives) == 0 {
		return fmt.Errorf("upgrade: no image archives (*.tar) in %q: run the new release's `make images`", opts.ImagesDir)
	}
	u := &upRun{ctx: ctx, layout: l, state: st, opts: Options{ImagesDir: opts.ImagesDir, DistDir: opts.DistDir,
		K8sBinDir: opts.K8sBinDir, NoMasqueradeCIDRs: opts.NoMasqueradeCIDRs, Out: opts.Out}}
	start := time.Now()
	if err := u.importImages(); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "upgrade: %d image archives imported into every node in %.1fs\n", len(archives), time.Since(start).Seconds())
	if err := u.writeInstallOverlay(); err != nil {
		return err
	}
	out, err := u.kubectl("kustomize", l.InstallDir())
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s: %w\n%s", l.InstallDir(), err, out)
	}
	first, err := withoutAgentDaemonSet(out)
	if err != nil {
		return err
	}
	start = time.Now()
	if err := u.applyAndRoll("deployment/"+kovsController, func() (string, error) { return u.kubectlIn(first, "apply", "-f", "-") }); err != nil {
		return err
	}
	if out, err := u.kubectl("-n", kovsNamespace, "rollout", "status", "deployment/"+kovsController, "--timeout=5m"); err != nil {
		return fmt.Errorf("upgrade: the controller's rollout: %w\n%s", err, out)
	}
	fmt.Fprintf(opts.Out, "upgrade: kovs-controller rolled out in %.1fs\n", time.Since(start).Seconds())
	start = time.Now()
	if err := u.applyAndRoll("daemonset/"+kovsAgentDS, func() (string, error) { return u.kubectl("apply", "-k", l.InstallDir()) }); err != nil {
		return err
	}
	if err := u.waitKovsRunning(); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "upgrade: kovs-agent rolled out on every node, every node Ready, in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// applyAndRoll runs apply and makes sure workload (deployment/NAME or daemonset/NAME in
// kube-system) replaces its pods: the new images carry the old ones' names (:latest), so
// a release whose dist/ leaves the pod template as it was would otherwise keep the old
// binaries running. A template apply changed rolls by itself; an unchanged one is
// restarted (kubectl rollout restart).
func (u *upRun) applyAndRoll(workload string, apply func() (string, error)) error {
	before, err := u.kubectl("-n", kovsNamespace, "get", workload, "-o", "jsonpath={.spec.template}")
	if err != nil {
		return fmt.Errorf("upgrade: %s: %w\n%s", workload, err, before)
	}
	if out, err := apply(); err != nil {
		return fmt.Errorf("upgrade: kubectl apply (%s): %w\n%s", workload, err, out)
	}
	after, err := u.kubectl("-n", kovsNamespace, "get", workload, "-o", "jsonpath={.spec.template}")
	if err != nil {
		return fmt.Errorf("upgrade: %s: %w\n%s", workload, err, after)
	}
	if after != before {
		return nil
	}
	fmt.Fprintf(u.opts.Out, "upgrade: the new dist/ leaves %s's pod template as it was: rollout restart\n", workload)
	if out, err := u.kubectl("-n", kovsNamespace, "rollout", "restart", workload); err != nil {
		return fmt.Errorf("upgrade: kubectl rollout restart %s: %w\n%s", workload, err, out)
	}
	return nil
}

// withoutAgentDaemonSet is the multi-document YAML of `kubectl kustomize` without the
// agent DaemonSet: what an upgrade applies before the agents.
func withoutAgentDaemonSet(manifests string) (string, error) {
	var keep []string
	found := false
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return "", fmt.Errorf("upgrade: a document of kubectl kustomize: %w", err)
		}
		if meta.Kind == "DaemonSet" && meta.Metadata.Name == kovsAgentDS && meta.Metadata.Namespace == kovsNamespace {
			found = true
			continue
		}
		keep = append(keep, doc)
	}
	if !found {
		return "", fmt.Errorf("upgrade: the new dist/ has no DaemonSet %s/%s", kovsNamespace, kovsAgentDS)
	}
	return strings.Join(keep, "\n---\n"), nil
}

// kubectlIn runs kubectl with stdin.
func (u *upRun) kubectlIn(stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(u.ctx, filepath.Join(u.opts.K8sBinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+u.layout.Kubeconfig())
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
