package agent

import (
	"errors"
	"fmt"
	"sync"

	log "github.com/sirupsen/logrus"
)

// errHostTablesRemoved is what a write gets once kovs has been uninstalled from the node.
var errHostTablesRemoved = errors.New("kovs was uninstalled from this node: its nftables tables are not written again")

// hostTables writes the nftables tables kovs keeps in the node's own networking:
// kovs-services (serviceHost) and kovs-masquerade (masquerader). Their writers run on
// their own goroutines (the Service proxy's runner, the masquerade runner), and one may be
// in the middle of an `nft -f` when the agent is stopped because kovs is being uninstalled
// (`kubectl delete -k` deletes the DaemonSet and the Services in one go, so an
// EndpointSlice change and the agent's SIGTERM come together). removeForGood waits for
// such a write and refuses every later one, so no table comes back after the uninstall
// removed it.
type hostTables struct {
	apply func(script string) error // runNFT; a recorder in unit tests

	mu      sync.Mutex
	removed bool
}

func newHostTables() *hostTables {
	return &hostTables{apply: runNFT}
}

// write applies one nft script (a whole table, replaced atomically), unless the tables
// were removed for good: then it applies nothing and returns errHostTablesRemoved.
func (t *hostTables) write(script string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.removed {
		return errHostTablesRemoved
	}
	return t.apply(script)
}

// removeForGood deletes the named tables once no write is in flight, and refuses every
// write after it (uninstall).
func (t *hostTables) removeForGood(tables ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removed = true
	for _, name := range tables {
		if err := t.apply(deleteTableScript(name)); err != nil {
			log.WithError(err).WithField("table", name).Warn("uninstall: remove the nftables table")
		}
	}
}

// deleteTableScript deletes table inet name whether or not it exists (nft has no
// "delete if exists" before 1.0.9: declaring the table first makes the delete succeed).
func deleteTableScript(name string) string {
	return fmt.Sprintf("table inet %s {}\ndelete table inet %s\n", name, name)
}
