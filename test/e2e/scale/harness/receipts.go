package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/controller/receipts"
)

// KovsClock is a sample of policy changes split at kovs-controller's own receipt of them
// (its NetworkPolicy informer's handler, --debug-receipts): kovs's time, from that
// receipt to the last concerned agent applying the change, and before it, from before the
// write to the receipt (kube-apiserver answering and its watch delivering). The harness and
// kovs-controller run on one machine: both times are read off the same clock.
type KovsClock struct {
	Kovs, ToReceipt Durations
	// NoReceipt counts realized changes the ring held no receipt for (Overwritten says
	// whether the ring dropped some); ReceivedAfterRealized those whose receipt came after
	// the last agent applied it: a wrong match, or a deletion that looked realized because
	// the churn had deleted the pods it selected on its last nodes.
	NoReceipt, ReceivedAfterRealized int
	Overwritten                      uint64
	// Kovs splits further where kovs-controller's write to each concerned node's policy
	// stream returned (its PolicyStreamWrite receipts, matched by node and the generation
	// the agent applied): Controller is from the receipt to the last of those writes,
	// kovs-controller's own part; Agents the slowest concerned agent's, from its write to
	// its applying it (loopback, and the simulated agent reading, decoding and applying:
	// the harness's CPU, which on a real cluster is each node's own). NoWrite counts the
	// changes timed in Kovs with some node's write not in the ring (WritesOverwritten
	// says whether it dropped some).
	Controller, Agents Durations
	NoWrite            int
	WritesOverwritten  uint64
}

// writeKey is a generation written to a node's stream.
type writeKey struct {
	node       string
	generation uint64
}

// receiptKey is a policy's creation or deletion as kovs-controller received it; the
// harness writes each policy name once and deletes it at most once, so the key is a
// change.
type receiptKey struct {
	policy  policyKey
	deleted bool
}

// splitAtReceipts matches realized changes to kovs-controller's receipts: the first
// receipt of the change's kind for its policy at or after the change's write began.
func splitAtReceipts(changes []finishedChange, dump receipts.Dump) KovsClock {
	first := map[receiptKey][]time.Time{}
	for _, r := range dump.Receipts {
		if r.Kind != "NetworkPolicy" {
			continue
		}
		k := receiptKey{policyKey{r.Namespace, r.Name}, r.Deleted}
		first[k] = append(first[k], r.At)
	}
	written := map[writeKey]time.Time{}
	for _, r := range dump.Receipts {
		if r.Kind != receipts.SentKind {
			continue
		}
		if g, err := strconv.ParseUint(r.ResourceVersion, 10, 64); err == nil {
			written[writeKey{r.Name, g}] = r.At
		}
	}
	k := KovsClock{Overwritten: dump.Overwritten["NetworkPolicy"], WritesOverwritten: dump.Overwritten[receipts.SentKind]}
	for _, c := range changes {
		var at time.Time
		for _, t := range first[receiptKey{c.policy, !c.create}] {
			if !t.Before(c.start) {
				at = t
				break
			}
		}
		switch {
		case at.IsZero():
			k.NoReceipt++
		case at.After(c.realized):
			k.ReceivedAfterRealized++
		default:
			k.Kovs = append(k.Kovs, c.realized.Sub(at))
			k.ToReceipt = append(k.ToReceipt, at.Sub(c.start))
			k.splitAtWrites(c, at, written)
		}
	}
	return k
}

// splitAtWrites adds c's controller part and slowest agent's part, if the ring holds the
// write of every generation that applied it.
func (k *KovsClock) splitAtWrites(c finishedChange, receipt time.Time, written map[writeKey]time.Time) {
	if len(c.applied) == 0 {
		return
	}
	var lastWrite time.Time
	var agents time.Duration
	for _, a := range c.applied {
		w, ok := written[writeKey{a.node, a.generation}]
		if !ok {
			k.NoWrite++
			return
		}
		if w.After(lastWrite) {
			lastWrite = w
		}
		agents = max(agents, a.at.Sub(w))
	}
	k.Controller = append(k.Controller, max(0, lastWrite.Sub(receipt)))
	k.Agents = append(k.Agents, agents)
}

// controllerReceipts pulls kovs-controller's receipts (the sandbox's scale mode runs it
// with --debug-receipts).
func (h *Harness) controllerReceipts(ctx context.Context) (receipts.Dump, error) {
	var d receipts.Dump
	body, err := h.controllerGet(ctx, receipts.Path)
	if err != nil {
		return d, fmt.Errorf("%w (is kovs-controller run with --debug-receipts?)", err)
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return d, fmt.Errorf("kovs-controller's %s: %w", receipts.Path, err)
	}
	return d, nil
}
