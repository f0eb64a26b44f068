package agent

import (
	"context"
	"regexp"
	"strconv"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// tableOfFlow finds the table number in a flow or delete text ("table=70, ..." or
// "table=70,priority=..."); table 0 is written without it.
var tableOfFlow = regexp.MustCompile(`(?:^|[ ,])table=(\d+)`)

// touchesPolicy reports whether any of the flow texts is in a policy table.
func touchesPolicy(texts []string) bool {
	for _, t := range texts {
		m := tableOfFlow.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		id, err := strconv.Atoi(m[1])
		if err != nil || id > 255 {
			continue
		}
		if tbl, ok := pipeline.TableByID(uint8(id)); ok &&
			(tbl.Stage == pipeline.StageEgressPolicy || tbl.Stage == pipeline.StageIngressPolicy) {
			return true
		}
	}
	return false
}

// invalidateAfterPolicyChange makes a policy change take effect on traffic already
// flowing, which two caches of the userspace datapath would otherwise hide:
//   - cached datapath flows: ovs-vswitchd 3.1's revalidators were seen to keep a megaflow
//     that no longer matched the tables (a drop outliving its deny rule for minutes, an
//     allow outliving its rule), so the datapath flows are purged and re-derived;
//   - SCTP conntrack: the userspace conntrack tracks SCTP by addresses only (ports 0), so
//     a new association between two pods that talked before looks established and would
//     skip policy; SCTP entries are flushed, and live associations are re-checked against
//     the new policy on their next packet.
func (a *Agent) invalidateAfterPolicyChange(ctx context.Context, deletes, adds []string) {
	if !touchesPolicy(deletes) && !touchesPolicy(adds) {
		return
	}
	v := a.of.Vswitchd()
	if a.netdev {
		if err := v.FlushConntrack(ctx, pipeline.CTZone, "ct_nw_proto=132"); err != nil {
			log.WithError(err).Warn("flush SCTP conntrack after a policy change")
		}
	}
	if err := v.PurgeDatapathFlows(ctx); err != nil {
		log.WithError(err).Warn("purge datapath flows after a policy change")
	}
}
