package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/kovsctl"
	"github.com/kovs-net/kovs/go-controller/pkg/ovsdaemon"
)

// logLines hands every log message of the agent's DaemonSet watch to a channel.
type logLines chan string

func (logLines) Levels() []log.Level { return log.AllLevels }
func (l logLines) Fire(e *log.Entry) error {
	if _, ok := e.Data["daemonset"]; ok {
		l <- e.Message
	}
	return nil
}

// waitLog waits for a message of the DaemonSet watch that contains want.
func (l logLines) waitLog(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-l:
			if strings.Contains(m, want) {
				return
			}
		case <-timeout:
			t.Fatalf("the agent's DaemonSet watch never logged %q", want)
		}
	}
}

// The node is cleaned up only when the operator asked for it (kovsctl uninstall) before
// the DaemonSet is deleted. `kubectl delete ds --cascade=orphan` and a new apply (a
// GitOps replace, changing an immutable field) delete the DaemonSet too: once, every
// agent's next shutdown deleted br-int, taking every pod of the cluster offline.
func TestUninstallOnlyWhenAsked(t *testing.T) {
	const ns, dsName = "kube-system", "kovs-agent"
	lines := make(logLines, 100)
	log.AddHook(lines)
	defer log.StandardLogger().ReplaceHooks(log.LevelHooks{})

	newAgent := func(t *testing.T, ctx context.Context) (*Agent, *fake.Clientset, *bridgeDeleter, []string) {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dsName}}
		yes := true
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kovs-agent-x1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: dsName, Controller: &yes}}}}
		client := fake.NewSimpleClientset(ds, pod)
		// The fake API has no resource versions: an event between the informer's list and
		// its watch would be lost, so the test acts once the watch is open.
		watching := make(chan struct{})
		var once sync.Once
		client.PrependWatchReactor("daemonsets", func(action clienttesting.Action) (bool, watch.Interface, error) {
			w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
			if err == nil {
				once.Do(func() { close(watching) })
			}
			return true, w, err
		})
		pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		if err := pods.Add(pod); err != nil {
			t.Fatal(err)
		}
		kernel := newKernelTables()
		close(kernel.hold) // no table write is held
		dir := t.TempDir()
		store := &bridgeDeleter{}
		a := &Agent{
			cfg: Config{NodeName: "node-1", Bridge: "br-int", GatewayName: "kovs-test-nogw", PodName: pod.Name, PodNamespace: ns,
				CNISocket: filepath.Join(dir, "cni.sock"), CNIBinDir: dir, OVSRundir: dir},
			client: client, store: store, pods: corelisters.NewPodLister(pods),
			tables: &hostTables{apply: kernel.apply},
		}
		files := []string{a.cfg.CNISocket, filepath.Join(dir, cniBinary)}
		for _, f := range files {
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		a.watchUninstall(ctx)
		select {
		case <-watching:
		case <-time.After(30 * time.Second):
			t.Fatal("the agent never watched its DaemonSet")
		}
		return a, client, store, files
	}
	deleteDS := func(t *testing.T, client *fake.Clientset) {
		orphan := metav1.DeletePropagationOrphan
		if err := client.AppsV1().DaemonSets(ns).Delete(context.Background(), dsName, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(t *testing.T, client *fake.Clientset) {
		if _, err := client.AppsV1().DaemonSets(ns).Create(context.Background(),
			&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dsName}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	requestUninstall := func(t *testing.T, client *fake.Clientset, withdraw bool) {
		if err := (kovsctl.Access{Client: client}).Uninstall(context.Background(), ns, dsName, withdraw, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	leftAlone := func(t *testing.T, a *Agent, store *bridgeDeleter, files []string) {
		t.Helper()
		a.cleanNodeIfUninstalled()
		if len(store.deleted) != 0 {
			t.Errorf("the agent's shutdown deleted %v though no one asked for an uninstall", store.deleted)
		}
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s is gone though no one asked for an uninstall: %v", f, err)
			}
		}
		if _, err := os.Stat(filepath.Join(a.cfg.OVSRundir, ovsdaemon.UninstallMarker)); err == nil {
			t.Error("OVS's uninstall marker is there though no uninstall is asked for: kovs-ovs would wait at every stop")
		}
	}

	t.Run("orphan delete and re-apply removes nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, client, store, files := newAgent(t, ctx)
		deleteDS(t, client)
		lines.waitLog(t, "DaemonSet deleted")
		apply(t, client)
		leftAlone(t, a, store, files)
	})

	t.Run("uninstall withdrawn removes nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, client, store, files := newAgent(t, ctx)
		requestUninstall(t, client, false)
		requestUninstall(t, client, true)
		deleteDS(t, client)
		lines.waitLog(t, "DaemonSet deleted")
		leftAlone(t, a, store, files)
	})

	t.Run("a DaemonSet applied again takes the request back", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, client, store, files := newAgent(t, ctx)
		requestUninstall(t, client, false)
		deleteDS(t, client)
		lines.waitLog(t, "kovs is being uninstalled")
		apply(t, client)
		lines.waitLog(t, "DaemonSet is back")
		leftAlone(t, a, store, files)
	})

	t.Run("kovsctl uninstall then delete cleans the node", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, client, store, files := newAgent(t, ctx)
		requestUninstall(t, client, false)
		deleteDS(t, client)
		lines.waitLog(t, "kovs is being uninstalled")
		marker := filepath.Join(a.cfg.OVSRundir, ovsdaemon.UninstallMarker)
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("no uninstall marker for kovs-ovs while the agent is to clean up: %v", err)
		}
		a.cleanNodeIfUninstalled()
		if _, err := os.Stat(marker); err == nil {
			t.Error("the uninstall marker is still there after the cleanup: kovs-ovs would wait for nothing")
		}
		if len(store.deleted) != 1 || store.deleted[0] != "br-int" {
			t.Errorf("bridges deleted: %v, want [br-int]", store.deleted)
		}
		for _, f := range files {
			if _, err := os.Stat(f); err == nil {
				t.Errorf("%s is still there after the uninstall", f)
			}
		}
	})
}
