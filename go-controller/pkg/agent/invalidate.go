package agent

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// touchesPolicy reports whether any of the flows is in a table of the policy stages
// (NetworkPolicy's and ClusterNetworkPolicy's).
func touchesPolicy(keys []ovs.FlowKey) bool {
	stages := pipeline.Stages()
	for _, k := range keys {
		if st, ok := stages.StageOfTable(k.Table); ok && (st.Category == pipeline.CategoryPolicy || st.Category == pipeline.CategoryClusterPolicy) {
			return true
		}
	}
	return false
}

// changedFlows are the keys of the flows a bundle deleted or added.
func changedFlows(p SwitchPlan) []ovs.FlowKey {
	keys := slices.Clone(p.DeleteFlows)
	for _, f := range p.AddFlows {
		keys = append(keys, f.FlowKey)
	}
	return keys
}

// invalidateAfterPolicyChange makes a policy change take effect on traffic already
// flowing, which caches of the datapath would otherwise hide:
//   - cached datapath flows: the cause, found on 2026-12-05, is a bug of OVS 3.1.0's
//     userspace datapath fixed in v3.1.3 ("dpif-netdev: Fix dpif_netdev_flow_put"): a
//     revalidator's modify of a megaflow is applied to whichever overlapping megaflow a
//     lookup by key finds first, not to the one its id names, and the intended flow keeps
//     its old actions until it idles out (docs/upgrades.md, "Policy changes and traffic
//     they do not concern"). What was seen before that:
//     ovs-vswitchd 3.1's revalidators were seen to keep a megaflow
//     that no longer matched the tables (a drop outliving its deny rule for minutes, an
//     allow outliving its rule). Seen without any invalidation on 2026-12-04,
//     intermittently: one of three IPv4 runs of the truth-table suite (test/e2e/netpol)
//     failed in case 28 step 3 (x/a -> z/a 80/tcp, denied in every step, connected in 531
//     of 547 probes) and case 37 (y/b -> x/a 80/tcp still dropped after the reset to no
//     policy). A wait for two revalidation rounds after each bundle (revalidator/wait)
//     passed TestPolicyChangeIsInForceOnTheNextPacket but failed the dual-stack truth
//     table in case 31 step 1 (z/a -> x/a 81/tcp over IPv6, denied, connected right after
//     realization; 2026-12-05): the misdirected modify above, which no number of
//     revalidation rounds repairs. Narrow invalidation deletes only the flows that may
//     have met a policy table (policyBlind: every such flow is one of a new connection,
//     an invalid one or SCTP, which is what all those failures were), by UFID behind the
//     revalidators' back: a revalidator round under way then modifies flows narrow
//     deleted, which 3.1.0 applies by key to another overlapping flow (a services run
//     logs about 30 such modifies with narrow and none with purge, docs/upgrades.md). So
//     narrow needs an ovs-vswitchd that modifies by UFID: 3.1.3 and later, or kovs's own
//     build of 3.1.0 (hack/ovs, since 2026-12-06). --datapath-invalidation=auto reads
//     the running ovs-vswitchd's version (narrowInvalidation) and narrows there. The
//     default stays purge (every datapath flow, revalidator/purge, which sends every
//     established connection of the node through upcalls again: BenchmarkPolicyChurn
//     counts them): with narrow on kovs's build the truth tables pass, but two local CI
//     runs under load failed a Service test (a flow that got no answer after its
//     Service changed), whose megaflows then rely on OVS's revalidation alone, where a
//     purge after any pod's policy change also clears them (docs/upgrades.md). TestPolicyChangeOverOverlappingMegaflows makes
//     the misdirected modify happen, and passes with either mode;
//   - SCTP conntrack: the userspace conntrack tracks SCTP by addresses only (ports 0). The
//     pipeline never trusts it for SCTP, but the entries are flushed all the same, so
//     related ICMP of associations the new policy denies no longer passes;
//   - learned SCTP replies (pipeline.SCTPReply): each lets the replies of an association
//     skip policy, and the new policy may deny that association. They are all deleted,
//     after the datapath flows (which may still run learn actions of the old
//     translations); a live association the new policy allows learns its reply again on
//     its next packet. The learned translations of stateless SCTP Services
//     (pipeline.SCTPPin and SCTPUnNAT) stay: they let nothing skip policy, and a live
//     association needs them to keep its endpoint.
//
// Any of them failing fails the sync (FlowSyncer.OnApplied): the policy is not reported
// realized, and the next sync invalidates again.
func (a *Agent) invalidateAfterPolicyChange(ctx context.Context, p SwitchPlan) error {
	if !touchesPolicy(changedFlows(p)) {
		return nil
	}
	v := a.of.Vswitchd()
	return invalidatePolicyCaches(ctx, v, a.of, a.netdev, a.narrowInvalidation(ctx, v))
}

// narrowInvalidation reports whether a policy change deletes only the datapath flows it
// may affect: --datapath-invalidation=narrow, or auto on an ovs-vswitchd that modifies
// megaflows by UFID (asked once per ovs-vswitchd: forgetVswitchdVersion on a restart).
// When the version can't be read, purge: the choice safe on every OVS.
func (a *Agent) narrowInvalidation(ctx context.Context, v versionReader) bool {
	switch a.cfg.DatapathInvalidation {
	case DatapathInvalidationNarrow:
		return true
	case DatapathInvalidationAuto:
		return a.vswitchdSafeForNarrow(ctx, v)
	}
	return false
}

// versionReader reads ovs-vswitchd's version (ovs-appctl version).
type versionReader interface {
	Version(ctx context.Context) (string, error)
}

// vswitchdSafeForNarrow answers narrowInvalidation's auto from the version ovs-vswitchd
// reports, read once until the next restart, and logs the choice when it is made.
func (a *Agent) vswitchdSafeForNarrow(ctx context.Context, v versionReader) bool {
	a.vswitchdVersion.Lock()
	defer a.vswitchdVersion.Unlock()
	if a.vswitchdVersion.known {
		return a.vswitchdVersion.narrow
	}
	version, err := v.Version(ctx)
	if err != nil {
		log.WithError(err).Warn("--datapath-invalidation=auto: ovs-vswitchd's version unreadable; this policy change purges every datapath flow")
		return false
	}
	narrow := ovsVersionModifiesByUFID(version)
	a.vswitchdVersion.known, a.vswitchdVersion.narrow = true, narrow
	mode := DatapathInvalidationPurge
	if narrow {
		mode = DatapathInvalidationNarrow
	}
	log.WithFields(log.Fields{"ovs-vswitchd": version, "invalidation": mode}).Info("--datapath-invalidation=auto: chosen for this ovs-vswitchd")
	return narrow
}

// forgetVswitchdVersion makes the next policy change ask a restarted ovs-vswitchd its
// version again: an OVS upgrade replaces the binary.
func (a *Agent) forgetVswitchdVersion() {
	a.vswitchdVersion.Lock()
	a.vswitchdVersion.known = false
	a.vswitchdVersion.Unlock()
}

// ovsVersionRE takes the version out of ovs-vswitchd's answer to `version`
// ("ovs-vswitchd (Open vSwitch) 3.1.0"): major, minor, patch and the rest.
var ovsVersionRE = regexp.MustCompile(`\(Open vSwitch\) ([0-9]+)\.([0-9]+)\.([0-9]+)(\S*)`)

// ovsVersionModifiesByUFID reports whether an ovs-vswitchd of this version applies a
// revalidator's modify to the megaflow its UFID names (or to none), which narrow
// invalidation needs (docs/upgrades.md, "Policy changes and traffic they do not
// concern"): upstream's fix ("dpif-netdev: Fix dpif_netdev_flow_put") is in 3.1.3 and
// the releases after it, 3.2.1 and 3.3.0 on; kovs's own build of 3.1.0 carries it and
// says so in its version (+kovs, hack/build-ovs.sh). Older series (3.0, 2.17) count as
// without it, though a distribution may have backported it: --datapath-invalidation=narrow
// is for those.
func ovsVersionModifiesByUFID(version string) bool {
	m := ovsVersionRE.FindStringSubmatch(version)
	if m == nil {
		return false
	}
	if strings.HasPrefix(m[4], "+kovs") {
		return true
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	patch, _ := strconv.Atoi(m[3])
	switch {
	case major != 3:
		return major > 3
	case minor == 1:
		return patch >= 3
	case minor == 2:
		return patch >= 1
	}
	return minor > 2
}

// datapathCaches are the ovs-vswitchd caches a policy change invalidates.
type datapathCaches interface {
	FlushConntrack(ctx context.Context, zone uint16, ipProto uint8) error
	DumpDatapathFlows(ctx context.Context) ([]ovs.DatapathFlow, error)
	DeleteDatapathFlows(ctx context.Context, ufids []string) error
	PurgeDatapathFlows(ctx context.Context) error
}

// maxDatapathDeletes bounds the datapath flows one invalidation deletes by UFID (over one
// unixctl connection); past it, all are purged at once (revalidator/purge). 1,000 took 40
// ms on the 2-core machine (BenchmarkDeleteDatapathFlows, pkg/ovs/integration), 200 took 7
// ms, against 0.9 s for 200 with an ovs-appctl process each.
const maxDatapathDeletes = 1000

// ctTracked, ctEstablished and ctRelated are bits of a datapath flow's ct_state
// (OVS_CS_F_*).
const (
	ctEstablished = 0x02
	ctRelated     = 0x04
	ctTracked     = 0x20
)

var (
	ctStateField = regexp.MustCompile(`(?:^|,)ct_state\((0x[0-9a-f]+)/(0x[0-9a-f]+)\)`)
	exactProto   = regexp.MustCompile(`(?:^|,)ipv[46]\((?:[^()]*,)?proto=([0-9]+)[,)]`)
)

// policyBlind reports whether a datapath flow's packets meet no policy table, so that no
// policy change can change what the flow does, on the evidence of its key alone:
//   - recirc_id(0): a packet's first pass, which ends in ConntrackZone's ct() before any
//     policy table (tables 0 to 30 lead only to each other and to that ct());
//   - a tracked packet of an established or related connection (ct_state +trk and +est or
//     +rel, both bits in the flow's mask) of a protocol other than SCTP (exact in the
//     key): ConntrackState sends it past EgressPolicy and IngressPolicy admits it before
//     any rule (NetworkPolicy is stateful; SCTP is checked on every packet).
//
// Anything else (new connections, invalid ones, SCTP, a key that does not say) may have
// met a policy table.
func policyBlind(f ovs.DatapathFlow) bool {
	if strings.HasPrefix(f.Key, "recirc_id(0),") || strings.Contains(f.Key, ",recirc_id(0),") {
		return true
	}
	m := ctStateField.FindStringSubmatch(f.Key)
	if m == nil {
		return false
	}
	value, err1 := strconv.ParseUint(m[1], 0, 8)
	mask, err2 := strconv.ParseUint(m[2], 0, 8)
	if err1 != nil || err2 != nil {
		return false
	}
	set := value & mask
	if set&ctTracked == 0 || set&(ctEstablished|ctRelated) == 0 {
		return false
	}
	p := exactProto.FindStringSubmatch(f.Key)
	return p != nil && p[1] != strconv.Itoa(int(pipeline.IPProtoSCTP))
}

// invalidateDatapathFlows deletes the datapath flows a policy change may have made
// stale: every one but those policyBlind keeps. When the dump or a deletion fails, or
// there are more than maxDatapathDeletes, it purges them all, as before (the purge is
// what was seen to work; this only narrows it).
func invalidateDatapathFlows(ctx context.Context, v datapathCaches) error {
	flows, err := v.DumpDatapathFlows(ctx)
	if err == nil {
		var stale []string
		for _, f := range flows {
			if !policyBlind(f) {
				stale = append(stale, f.UFID)
			}
		}
		if len(stale) <= maxDatapathDeletes {
			if err = v.DeleteDatapathFlows(ctx, stale); err == nil {
				return nil
			}
		}
	}
	if err != nil {
		log.WithError(err).Warn("after a policy change: deleting the datapath flows it may affect failed; purging them all")
	}
	return v.PurgeDatapathFlows(ctx)
}

// flowDeleter deletes flows by cookie.
type flowDeleter interface {
	DeleteFlows(ctx context.Context, cookie, mask uint64) error
}

// invalidatePolicyCaches invalidates the caches after a policy change: with narrow, only
// the datapath flows that may have met a policy table (invalidateDatapathFlows,
// narrowInvalidation), otherwise every one (revalidator/purge).
func invalidatePolicyCaches(ctx context.Context, v datapathCaches, of flowDeleter, netdev, narrow bool) error {
	if netdev {
		if err := v.FlushConntrack(ctx, pipeline.CTZone, pipeline.IPProtoSCTP); err != nil {
			return fmt.Errorf("after a policy change: %w", err)
		}
	}
	purge := v.PurgeDatapathFlows
	if narrow {
		purge = func(ctx context.Context) error { return invalidateDatapathFlows(ctx, v) }
	}
	if err := purge(ctx); err != nil {
		return fmt.Errorf("after a policy change: %w", err)
	}
	learned := pipeline.LearnedReplyFilter()
	if err := of.DeleteFlows(ctx, uint64(learned.Value), uint64(learned.Mask)); err != nil {
		return fmt.Errorf("after a policy change: delete the learned SCTP replies (cookie %s): %w", learned, err)
	}
	return nil
}

// evictTranslations deletes the learned SCTP translations to endpoints that left their
// Service's EndpointSlices, once generation gen, whose flows no longer choose those
// endpoints, is installed (NodeState.TakeEvictions).
func (a *Agent) evictTranslations(gen uint64) {
	filters := a.state.TakeEvictions(gen)
	if len(filters) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, f := range filters {
		if err := a.of.DeleteFlows(ctx, uint64(f.Value), uint64(f.Mask)); err != nil {
			log.WithError(err).WithField("cookie", f).Warn("delete the learned SCTP translations of an endpoint that left its Service")
		}
	}
}
