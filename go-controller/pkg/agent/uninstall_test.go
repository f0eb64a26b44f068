package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
)

// kernelTables plays the kernel's nftables for hostTables.apply: it keeps which kovs tables
// exist after each script, and can hold the first script (an `nft -f` in flight).
type kernelTables struct {
	mu      sync.Mutex
	present map[string]bool
	hold    chan struct{} // closed to let the held script finish
	held    chan struct{} // closed once the held script is in flight
	calls   int
}

func newKernelTables() *kernelTables {
	return &kernelTables{present: map[string]bool{}, hold: make(chan struct{}), held: make(chan struct{})}
}

func (k *kernelTables) apply(script string) error {
	k.mu.Lock()
	k.calls++
	first := k.calls == 1
	k.mu.Unlock()
	if first {
		close(k.held)
		<-k.hold
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range []string{serviceNFTable, masqueradeNFTable, tunnelGuardNFTable} {
		// A script declares the table empty ("{}"), deletes it, then may create it whole.
		deleted := strings.LastIndex(script, "delete table inet "+name+"\n")
		created := strings.LastIndex(script, "table inet "+name+" {\n")
		switch {
		case created > deleted:
			k.present[name] = true
		case deleted >= 0:
			k.present[name] = false
		}
	}
	return nil
}

func (k *kernelTables) has(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.present[name]
}

// bridgeDeleter is the part of the OVS store the uninstall uses.
type bridgeDeleter struct {
	ovs.Store
	deleted []string
}

func (b *bridgeDeleter) DeleteBridge(_ context.Context, name string) error {
	b.deleted = append(b.deleted, name)
	return nil
}

// An uninstall that comes while a table write is in flight (kubectl delete -k deletes the
// DaemonSet and the Services together) must still leave the node without kovs's nftables
// tables: the write finishes first, then the tables are removed, and no later write
// brings them back. Seen in a real-node run: kovs-services was left on a node.
func TestUninstallRemovesTablesAfterAWriteInFlight(t *testing.T) {
	for _, tc := range []struct {
		table string
		// write starts a table write; finished waits for it, again writes once more.
		write func(ctx context.Context, a *Agent) (finished, again func())
	}{
		{serviceNFTable, func(_ context.Context, a *Agent) (func(), func()) {
			hook := a.serviceHostHook()
			if hook == nil {
				t.Fatal("no Service host hook: the node is not in the lister")
			}
			done := make(chan struct{})
			go func() {
				hook(nil, true)
				close(done)
			}()
			return func() { <-done }, func() { hook(nil, true) }
		}},
		{masqueradeNFTable, func(ctx context.Context, a *Agent) (func(), func()) {
			started := make(chan func(), 1)
			go func() { started <- a.startMasquerade(ctx, map[bool]bool{false: true}) }()
			var rewrite func()
			return func() { rewrite = <-started }, func() {
				rewrite()
				// The runner's next pass, as the agent's periodic rewrite would run it.
				m := &masquerader{gateway: a.cfg.GatewayName, families: map[bool]bool{false: true}, nodes: a.allNodeAddresses, tables: a.tables}
				m.sync()
			}
		}},
		{tunnelGuardNFTable, func(ctx context.Context, a *Agent) (func(), func()) {
			a.netdev = true
			started := make(chan func(), 1)
			go func() { started <- a.startTunnelGuard(ctx) }()
			var rewrite func()
			return func() { rewrite = <-started }, func() {
				rewrite()
				// The runner's next pass, as the agent's periodic rewrite would run it.
				(&tunnelGuard{nodes: a.allNodeAddresses, tables: a.tables}).sync()
			}
		}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			kernel := newKernelTables()
			dir := t.TempDir()
			nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
				t.Fatal(err)
			}
			store := &bridgeDeleter{}
			a := &Agent{
				cfg: Config{NodeName: "node-1", Bridge: "br-int", GatewayName: "kovs-test-nogw",
					CNISocket: filepath.Join(dir, "cni.sock"), CNIBinDir: dir},
				store: store, nodes: corelisters.NewNodeLister(nodes), tables: &hostTables{apply: kernel.apply},
			}
			for _, f := range []string{a.cfg.CNISocket, filepath.Join(dir, cniBinary)} {
				if err := os.WriteFile(f, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			a.uninstall.removed.Store(true)

			finished, again := tc.write(ctx, a)
			<-kernel.held
			cleaned := make(chan struct{})
			go func() {
				a.cleanNodeIfUninstalled()
				close(cleaned)
			}()
			// The uninstall must wait for the write in flight; give it time to get as far
			// as it goes without that write finishing.
			select {
			case <-cleaned:
			case <-time.After(500 * time.Millisecond):
			}
			close(kernel.hold)
			finished()
			<-cleaned
			cancel()
			if kernel.has(tc.table) {
				t.Errorf("the write in flight re-created nftables table %s after the uninstall removed it", tc.table)
			}
			again()
			if kernel.has(tc.table) {
				t.Errorf("a write after the uninstall re-created nftables table %s", tc.table)
			}
			if len(store.deleted) != 1 || store.deleted[0] != "br-int" {
				t.Errorf("bridges deleted: %v, want [br-int]", store.deleted)
			}
			for _, f := range []string{a.cfg.CNISocket, filepath.Join(dir, cniBinary)} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s is still there", f)
				}
			}
		})
	}
}
