package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	return u.handOverNodeOVS()
}

// HandOverLine matches the line Upgrade prints for each node it hands over from the
// sandbox's OVS to kovs-ovs: the node, when its old ovs-vswitchd was stopped and when
// br-int had its flows again in the new one (RFC 3339).
var HandOverLine = regexp.MustCompile(`upgrade: (\S+)'s OVS handed over to its kovs-ovs pod in \S+ \(stopped at (\S+), flows back at (\S+)\)`)

// handOverNodeOVS moves the nodes of a sandbox made by a release before the kovs-ovs
// DaemonSet (2026-12-05) from the OVS that sandbox ran on each node itself (processes
// <node>-ovsdb-server and <node>-ovs-vswitchd, the database in the node's OVS directory:
// that release's overlay removed dist's OVS container, the host's OVS of a real node) to
// the kovs-ovs pods the new dist/ runs, whose kovs-ovs waits while another ovsdb-server
// serves the node. Node by node, as an operator moving from the host's OVS to the
// DaemonSet does (`systemctl stop openvswitch-switch`; on a host the database already is
// in /etc/openvswitch, where kovs-ovs keeps it): the database linked into the node's
// /etc/openvswitch, ovs-vswitchd stopped, then ovsdb-server, and the node's kovs-ovs
// answering with its own daemons and br-int's flows back (the agent's resync) before the
// next node. A sandbox made by this release runs no such
// processes: nothing to do.
func (u *upRun) handOverNodeOVS() error {
	l := u.layout
	moved := 0
	for _, n := range u.state.Nodes {
		db, vswitchd := n.Name+"-ovsdb-server", n.Name+"-ovs-vswitchd"
		if !l.Running(db) && !l.Running(vswitchd) {
			continue
		}
		start := time.Now()
		var stopped time.Time
		// The database is at kovs-ovs's path before its ovsdb-server stops: kovs-ovs
		// starts within a tenth of a second of that, and would create a database of its
		// own if it found none. A hard link: the same file, which the running
		// ovsdb-server keeps appending to.
		from, to := filepath.Join(l.OVSDir(n.Name), "conf.db"), filepath.Join(l.nodePath(n.Name, "etc-openvswitch"), "conf.db")
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.Link(from, to); err != nil {
			return fmt.Errorf("upgrade: hand %s's OVS over to kovs-ovs: put its database where kovs-ovs keeps it: %w", n.Name, err)
		}
		stopped = time.Now()
		for _, name := range []string{vswitchd, db} {
			if err := l.stop(name, 10*time.Second); err != nil {
				return fmt.Errorf("upgrade: hand %s's OVS over to kovs-ovs: %w", n.Name, err)
			}
		}
		if err := os.Remove(from); err != nil {
			return err
		}
		ctl := filepath.Join(l.OVSDir(n.Name), "ovs-vswitchd.ctl")
		err := waitFor(u.ctx, 2*time.Minute, n.Name+"'s kovs-ovs to start ovs-vswitchd", func() error {
			out, err := exec.CommandContext(u.ctx, "ovs-appctl", "--timeout=2", "-t", ctl, "version").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			}
			return nil
		})
		if err != nil {
			return err
		}
		// br-int is fail_mode=secure: its table stays empty until the node's agent
		// resyncs, which puts its whole pipeline in in one bundle. Only then is the node's
		// traffic back, and the next node may pause.
		mgmt := "unix:" + filepath.Join(l.OVSDir(n.Name), "br-int.mgmt")
		err = waitFor(u.ctx, 2*time.Minute, n.Name+"'s agent to restore br-int's flows", func() error {
			out, err := exec.CommandContext(u.ctx, "ovs-ofctl", "-O", "OpenFlow13", "--timeout=2", "dump-aggregate", mgmt).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			}
			if strings.Contains(string(out), "flow_count=0") {
				return fmt.Errorf("br-int has no flows yet")
			}
			return nil
		})
		if err != nil {
			return err
		}
		moved++
		// The times say when the node's traffic paused (the old ovs-vswitchd's stop) and
		// when br-int had its flows again in the new one: HandOverLine.
		fmt.Fprintf(u.opts.Out, "upgrade: %s's OVS handed over to its kovs-ovs pod in %.1fs (stopped at %s, flows back at %s)\n",
			n.Name, time.Since(start).Seconds(), stopped.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	}
	if moved == 0 {
		return nil
	}
	return u.waitKovsRunning()
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
