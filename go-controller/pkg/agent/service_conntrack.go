package agent

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// Stale UDP conntrack entries. UDP has no end of connection: a client that keeps sending
// from one port keeps its conntrack entry in br-int's zone alive for as long as it sends,
// and every packet follows the entry, not the Service's flows. Two kinds of entry outlive
// their reason:
//   - one translated to an endpoint that has left the Service (its pod deleted, or no
//     longer serving): the client keeps sending to an address that no longer answers,
//     or to a pod that is no longer the Service's;
//   - one that began while the port had no endpoints: not translated (br-int had no
//     ServiceLB flow for it; the host rejected it), it stays untranslated once endpoints
//     come, and the client keeps being rejected.
//
// kube-proxy deletes both (pkg/proxy/conntrack CleanStaleEntries, UDP only): every entry
// whose original destination is a frontend of a UDP Service port and whose answers come
// from anything but a serving endpoint of that port. kovs does the same in br-int's zone,
// after the flows of the change are installed (so the next packet takes the new flows),
// whenever a UDP Service port changed, and after the Service proxy's first sync.

// conntrackTable is the conntrack of ovs-vswitchd's datapath (ovs.Vswitchd).
type conntrackTable interface {
	DumpConntrack(ctx context.Context, zone uint16) ([]ovs.ConntrackEntry, error)
	FlushConntrackFlows(ctx context.Context, f ovs.ConntrackFlows) error
}

// conntrackCleanupTimeout bounds one cleanup (a dump of the zone and the flushes).
const conntrackCleanupTimeout = 30 * time.Second

// cleanStaleConntrack deletes the stale UDP conntrack entries of Services once generation
// gen, which holds the flows of the change that called for it, is installed. A failure is
// logged and the cleanup runs again after the next flow sync.
func (a *Agent) cleanStaleConntrack(gen uint64) {
	services, due := a.state.TakeConntrackCleanup(gen)
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), conntrackCleanupTimeout)
	defer cancel()
	n, err := deleteStaleUDPEntries(ctx, a.of.Vswitchd(), services)
	if err != nil {
		log.WithError(err).Warn("delete stale UDP conntrack entries of Services (again after the next flow sync)")
		a.state.RetryConntrackCleanup()
		return
	}
	if n > 0 {
		log.WithField("flushed", n).Info("deleted stale UDP conntrack entries of Services")
	}
}

// deleteStaleUDPEntries dumps br-int's zone and flushes the stale UDP entries of services
// (staleUDPFlows); it reports how many frontend and answerer pairs it flushed.
func deleteStaleUDPEntries(ctx context.Context, ct conntrackTable, services map[string][]pipeline.ServicePort) (int, error) {
	if !slices.ContainsFunc(slices.Collect(maps.Values(services)), hasUDP) {
		return 0, nil
	}
	entries, err := ct.DumpConntrack(ctx, pipeline.CTZone)
	if err != nil {
		return 0, err
	}
	stale := staleUDPFlows(entries, services)
	var errs []error
	for _, f := range stale {
		if err := ct.FlushConntrackFlows(ctx, f); err != nil {
			errs = append(errs, err)
		}
	}
	return len(stale) - len(errs), errors.Join(errs...)
}

// staleUDPFlows picks the stale entries among entries (of br-int's zone), as kube-proxy's
// CleanStaleEntries does: a UDP entry whose original destination is a frontend of a UDP
// Service port (ClusterIP:port; or ClusterIP:nodePort, where the host sends the port's
// NodePort traffic) and whose answers come from anything but a serving endpoint of the
// port (ServicePort.Serving), whatever the traffic policies, so a policy change moves no
// live flow. A port without serving endpoints has every entry of its frontends stale:
// they go to endpoints that are gone, or were never translated. Entries are grouped by
// frontend and answerer (one flush each), sorted.
func staleUDPFlows(entries []ovs.ConntrackEntry, services map[string][]pipeline.ServicePort) []ovs.ConntrackFlows {
	serving := map[netip.AddrPort][]netip.AddrPort{} // frontend -> serving endpoints
	for _, ports := range services {
		for _, p := range ports {
			if p.IPProto != pipeline.IPProtoUDP {
				continue
			}
			serving[netip.AddrPortFrom(p.ClusterIP, p.Port)] = p.Serving
			for _, ip := range p.ExternalIPs {
				serving[netip.AddrPortFrom(ip, p.Port)] = p.Serving
			}
			if p.NodePort != 0 {
				serving[netip.AddrPortFrom(p.ClusterIP, p.NodePort)] = p.Serving
			}
		}
	}
	stale := map[ovs.ConntrackFlows]bool{}
	for _, e := range entries {
		if e.IPProto != pipeline.IPProtoUDP {
			continue
		}
		eps, frontend := serving[e.Orig.Dst]
		if !frontend || slices.Contains(eps, e.Reply.Src) {
			continue
		}
		stale[ovs.ConntrackFlows{Zone: e.Zone, IPProto: e.IPProto, OrigDst: e.Orig.Dst, ReplySrc: e.Reply.Src}] = true
	}
	return slices.SortedFunc(maps.Keys(stale), func(a, b ovs.ConntrackFlows) int {
		if c := a.OrigDst.Compare(b.OrigDst); c != 0 {
			return c
		}
		return a.ReplySrc.Compare(b.ReplySrc)
	})
}

// hasUDP reports whether any of ports is UDP.
func hasUDP(ports []pipeline.ServicePort) bool {
	return slices.ContainsFunc(ports, func(p pipeline.ServicePort) bool { return p.IPProto == pipeline.IPProtoUDP })
}

// TakeConntrackCleanup reports whether a cleanup of stale UDP conntrack entries is due now
// that generation gen is installed and, if so, forgets it and returns the Services to
// clean by (the newest: endpoints they added are not stale, entries to endpoints they
// removed are, and a later change's own cleanup follows its own generation).
func (s *NodeState) TakeConntrackCleanup(gen uint64) (map[string][]pipeline.ServicePort, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conntrackDue == 0 || s.conntrackDue > gen {
		return nil, false
	}
	s.conntrackDue = 0
	return maps.Clone(s.services), true
}

// RetryConntrackCleanup makes the cleanup due again, after the next flow sync (it failed).
func (s *NodeState) RetryConntrackCleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conntrackDue == 0 {
		s.conntrackDue = s.generation
	}
}
