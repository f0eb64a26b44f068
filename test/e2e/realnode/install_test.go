package realnode_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
	"github.com/kovs-net/kovs/go-controller/pkg/ovsdaemon"
	"github.com/kovs-net/kovs/test/e2e/framework"
)

// agentDaemonSet is dist/'s kovs-agent DaemonSet as kustomize renders it: the tests run
// its containers exactly as shipped.
func agentDaemonSet(t *testing.T, s *framework.Sandbox) *appsv1.DaemonSet {
	t.Helper()
	dist, err := filepath.Abs("../../../dist")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(kubectlOK(t, s, "kustomize", dist), "\n---\n") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err == nil && ds.Kind == "DaemonSet" && ds.Name == "kovs-agent" {
			return &ds
		}
	}
	t.Fatal("dist/ renders no kovs-agent DaemonSet")
	return nil
}

func initContainer(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("the kovs-agent DaemonSet has no init container %q", name)
	return corev1.Container{}
}

// checkOVSDaemonSet requires Open vSwitch to run as dist/ ships it, in the kovs-ovs
// DaemonSet and nowhere else: one Ready pod per node that has never restarted, whose
// ovsdb-server (with the agent's br-int) and ovs-vswitchd answer kubectl exec; no
// container of the kovs-agent pods runs OVS.
func checkOVSDaemonSet(t *testing.T, s *framework.Sandbox) {
	ovs := podsOf(t, s, "kube-system", "app=kovs-ovs")
	if len(ovs) != 3 {
		t.Fatalf("kovs-ovs pods on %d nodes, want one on each of 3: %v", len(ovs), ovs)
	}
	for node, p := range ovs {
		st := p.Status.ContainerStatuses
		if len(st) != 1 || !st[0].Ready || st[0].RestartCount != 0 || st[0].State.Running == nil {
			t.Errorf("%s: the kovs-ovs pod %s is not up and unrestarted: %+v", node, p.Name, st)
			continue
		}
		for _, cmd := range [][]string{{"ovs-vsctl", "--timeout=5", "br-exists", "br-int"}, {"ovs-appctl", "--timeout=5", "-t", "ovs-vswitchd", "version"}} {
			if out, err := execIn(s, "kube-system", p.Name, cmd...); err != nil {
				t.Errorf("%s: %v in %s: %v\n%s", node, cmd, p.Name, err, out)
			}
		}
		if ovsVswitchdPid(s, node) == 0 {
			t.Errorf("%s: no ovs-vswitchd runs in the node's containers", node)
		}
	}
	for node, p := range podsOf(t, s, "kube-system", "app=kovs-agent") {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if strings.Contains(c.Image, "kovs/ovs") {
				t.Errorf("%s: the kovs-agent pod %s runs %s (%s): OVS belongs to the kovs-ovs DaemonSet", node, p.Name, c.Name, c.Image)
			}
		}
	}
}

// ovsVswitchdPid is the pid of the ovs-vswitchd running in node's containers (its
// cgroups are under the node's cgroup root), or 0.
func ovsVswitchdPid(s *framework.Sandbox, node string) int {
	root := []byte(s.Layout.CgroupRoot(node) + "/")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "ovs-vswitchd" {
			continue
		}
		if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); bytes.Contains(cg, root) {
			return pid
		}
	}
	return 0
}

// checkInstallDuringAdd reruns dist/'s install-cni init container on node3 while a CNI
// ADD executes kovs-cni there: the ADD is held in flight by stopping the node's agent
// (SIGSTOP) once kovs-cni asked it for the pod's network. The install must succeed, the
// ADD must go on and the pod must run.
func checkInstallDuringAdd(t *testing.T, s *framework.Sandbox) {
	agent := nodeProcess(t, s, "kovs-agent", "NODE_NAME=node3")
	if err := syscall.Kill(agent, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(agent, syscall.SIGCONT)
		}
	}
	defer resume()
	s.Apply(`apiVersion: v1
kind: Pod
metadata: {name: late, namespace: ` + ns + `}
spec:
  nodeName: node3
  containers: [{name: c, image: ` + agnhost + `, imagePullPolicy: IfNotPresent, args: [pause]}]
`)
	var add int
	framework.Eventually(t, 60*time.Second, "kovs-cni ADD of realnode/late running on node3", func() error {
		add = findProcess(s, "kovs-cni", "CNI_COMMAND=ADD", "K8S_POD_NAME=late")
		if add == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	c := initContainer(t, agentDaemonSet(t, s), "install-cni")
	reinstall := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reinstall-cni", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "node3", HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "cni-bin", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/opt/cni/bin"}}}}},
	}
	ctx := context.Background()
	if _, err := s.Client.CoreV1().Pods(ns).Create(ctx, reinstall, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the install-cni rerun to finish", func() error {
		p, err := s.Client.CoreV1().Pods(ns).Get(ctx, "reinstall-cni", metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			logs, _ := s.Kubectl("-n", ns, "logs", "reinstall-cni")
			t.Fatalf("install-cni failed while a CNI ADD was in flight:\n%s", logs)
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	if !alive(add) {
		t.Fatalf("the in-flight kovs-cni ADD (pid %d) did not survive the install", add)
	}
	resume()
	p := s.WaitRunning(t, ns, "late", 90*time.Second)
	events, err := s.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=late"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "FailedCreatePodSandBox" {
			t.Errorf("the pod's sandbox failed once: %s", e.Message)
		}
	}
	// The installed binary is whole and runs: it answers CNI VERSION, and no temporary
	// file is left beside it.
	bin := s.Layout.CNIBinDir("node3")
	version := exec.Command(filepath.Join(bin, "kovs-cni"))
	version.Env = []string{"CNI_COMMAND=VERSION"}
	if out, err := version.CombinedOutput(); err != nil || !strings.Contains(string(out), "supportedVersions") {
		t.Errorf("node3's kovs-cni after the rerun does not answer VERSION: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(bin, ".kovs-cni*")); len(left) != 0 {
		t.Errorf("temporary files left in node3's CNI bin directory: %v", left)
	}
	t.Logf("pod %s got %v through an ADD that outlived an install-cni rerun", p.Name, p.Status.PodIPs)
}

// checkUninstall removes the test's workloads, asks for the uninstall as an operator
// does (kovsctl uninstall), then removes kovs with kubectl delete -k (the agents and OVS
// stop together; OVS waits for the agents' cleanup), and requires every node to be left
// without kovs: no br-int (so no flows or ports), no gateway device, no Service or
// masquerade rules, no conflist, socket or kovs-cni binary.
func checkUninstall(t *testing.T, s *framework.Sandbox) {
	kubectlOK(t, s, "delete", "namespace", ns, "--wait=true", "--timeout=120s")
	if err := (kovsctl.Access{Client: s.Client}).Uninstall(context.Background(), "kube-system", "kovs-agent", false, io.Discard); err != nil {
		t.Fatal(err)
	}
	// The agents mark the request for OVS before it is deleted.
	for _, n := range []string{"node1", "node2", "node3"} {
		marker := filepath.Join(s.Layout.OVSDir(n), ovsdaemon.UninstallMarker)
		framework.Eventually(t, 30*time.Second, n+"'s agent to mark the uninstall for OVS", func() error {
			_, err := os.Stat(marker)
			return err
		})
	}
	kubectlOK(t, s, "delete", "-k", s.Layout.InstallDir(), "--wait=true", "--timeout=120s")
	waitNoPods(t, s, "app in (kovs-agent, kovs-controller, kovs-ovs)")
	for _, n := range []string{"node1", "node2", "node3"} {
		l := s.Layout
		// OVS is gone: br-int must be gone from its database on the node, where br-ex
		// (the node's, not kovs's) stays and shows the file is the one OVS used.
		bridges, err := exec.Command("ovsdb-tool", "query", filepath.Join(l.NodeDir(n), "etc-openvswitch", "conf.db"),
			`["Open_vSwitch",{"op":"select","table":"Bridge","where":[],"columns":["name"]}]`).CombinedOutput()
		switch {
		case err != nil:
			t.Errorf("%s: read the OVS database: %v\n%s", n, err, bridges)
		case !strings.Contains(string(bridges), `"br-ex"`):
			t.Errorf("%s: the OVS database has no br-ex, so it is not the node's: %s", n, bridges)
		case strings.Contains(string(bridges), `"br-int"`):
			t.Errorf("%s: br-int is still in the OVS database: %s", n, bridges)
		}
		for _, f := range []string{filepath.Join(l.CNIConfDir(n), "10-kovs.conflist"), filepath.Join(l.CNIBinDir(n), "kovs-cni"),
			filepath.Join(l.NodeDir(n), "kovs-run", "cni.sock")} {
			if _, err := os.Stat(f); err == nil {
				t.Errorf("%s: %s is still there", n, f)
			}
		}
		netns := l.NodeNetNS(n)
		if out, err := exec.Command("ip", "netns", "exec", netns, "ip", "link", "show", "kovs-gw0").CombinedOutput(); err == nil {
			t.Errorf("%s: kovs-gw0 is still there:\n%s", n, out)
		}
		for _, table := range []string{"kovs-services", "kovs-masquerade", "kovs-tunnel"} {
			if out, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "table", "inet", table).CombinedOutput(); err == nil {
				t.Errorf("%s: nftables table %s is still there:\n%s", n, table, out)
			}
		}
	}
}

// waitNoPods waits until kube-system has no pod of the label selector.
func waitNoPods(t *testing.T, s *framework.Sandbox, selector string) {
	t.Helper()
	framework.Eventually(t, 120*time.Second, "no pod "+selector+" in kube-system", func() error {
		pods, err := s.Client.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left, e.g. %s", len(pods.Items), pods.Items[0].Name)
		}
		return nil
	})
}

// nodeProcess finds the one process of this sandbox named name whose environment has env
// (a container's process: it runs in one of the sandbox's cgroups).
func nodeProcess(t *testing.T, s *framework.Sandbox, name, env string) int {
	t.Helper()
	pid := findProcess(s, name, env)
	if pid == 0 {
		t.Fatalf("no %s process with %s in sandbox %s", name, env, s.Layout.Name)
	}
	return pid
}

// findProcess returns a process of this sandbox's real nodes executing a binary named
// name with every one of envs in its environment, or 0.
func findProcess(s *framework.Sandbox, name string, envs ...string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != name {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !bytes.Contains(cg, []byte(s.Layout.NetNSPrefix())) && !bytes.Contains(environ, []byte("KOVS_SANDBOX="+s.Layout.Marker())) {
			continue
		}
		vars := bytes.Split(environ, []byte{0})
		if hasAll(vars, envs) {
			return pid
		}
	}
	return 0
}

func hasAll(vars [][]byte, envs []string) bool {
	for _, want := range envs {
		found := false
		for _, v := range vars {
			if bytes.Equal(v, []byte(want)) || (strings.HasPrefix(want, "K8S_") && bytes.Contains(v, []byte(want))) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
