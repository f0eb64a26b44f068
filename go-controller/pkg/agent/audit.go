package agent

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
	"github.com/kovs-net/kovs/go-controller/pkg/ovs"
	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
	"github.com/kovs-net/kovs/go-controller/pkg/policy"
)

// DefaultAuditRate is the audit meter's default rate: packet-ins a second per node.
const DefaultAuditRate = 3000

// auditLog is the node's policy audit log (docs/audit.md): the flows of logged objects
// copy a new connection's first packet to the agent through the audit meter; the agent
// reads the copies from an `ovs-ofctl monitor` of br-int, finds the rule that decided from
// the flow's cookie, and writes one JSON line per decision.
type auditLog struct {
	a      *Agent
	writer *audit.Writer
	names  *podNames
	// packetIns counts the copies received; unresolved those whose flow named no rule the
	// agent knows (a share that changed in between).
	packetIns, unresolved atomic.Uint64

	mu       sync.Mutex
	share    *policy.NodeShare // the share rules was indexed from
	rules    map[uint32]policy.Rule
	clusters map[uint32]policy.ClusterRule
}

// startAudit creates the audit meter and starts the log's writer, the packet-in monitor
// and the annotation watch. Without an audit log path the node logs nothing.
func (a *Agent) startAudit(ctx context.Context) error {
	if a.cfg.AuditLog.Path == "" {
		return nil
	}
	rate := a.cfg.AuditRate
	if err := a.setAuditMeter(ctx); err != nil {
		return err
	}
	l := &auditLog{a: a, writer: audit.NewFileWriter(a.cfg.AuditLog), names: newPodNames(a)}
	a.metrics.auditStarted(l)
	go func() {
		if err := l.writer.Run(ctx, 100*time.Millisecond); err != nil {
			log.WithError(err).Error("audit log writer stopped")
		}
	}()
	go l.monitor(ctx)
	a.watchAuditAnnotations(ctx)
	log.WithField("node", a.cfg.NodeName).WithField("path", a.cfg.AuditLog.Path).WithField("rate", rate).Info("policy audit log on")
	return nil
}

// setAuditMeter creates (or corrects) the audit meter.
func (a *Agent) setAuditMeter(ctx context.Context) error {
	rate := a.cfg.AuditRate
	return a.of.SetMeter(ctx, ovs.Meter{ID: pipeline.AuditMeterID, RateKbps: rate, BurstKbits: rate, Packets: true})
}

// monitor reads packet-ins until ctx ends, restarting ovs-ofctl monitor when it exits. An
// ovs-vswitchd restart closes its connection and loses the meters: the meter is set again
// before each start.
func (l *auditLog) monitor(ctx context.Context) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			if err := l.a.setAuditMeter(ctx); err != nil {
				log.WithError(err).Warn("audit log: set the audit meter")
			}
		}
		err := l.a.of.MonitorPacketIns(ctx, func(r io.Reader) error {
			return audit.ScanPacketIns(r, func(p audit.PacketIn) { l.handle(ctx, p, time.Now()) })
		})
		if err != nil && ctx.Err() == nil {
			log.WithError(err).Warn("audit log: packet-in monitor stopped; restarting in 1s")
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (l *auditLog) handle(ctx context.Context, p audit.PacketIn, now time.Time) {
	l.packetIns.Add(1)
	r, ok := l.record(p, now)
	if !ok {
		l.unresolved.Add(1)
		return
	}
	src, _ := p.Addr(true)
	dst, _ := p.Addr(false)
	r.SrcPod, r.DstPod = l.names.of(ctx, src), l.names.of(ctx, dst)
	if err := l.writer.Write(r); err != nil {
		log.WithError(err).Warn("audit log: write failed")
	}
}

// record is the line of a packet-in: the rule its flow's cookie names, the verdict its
// userdata carries, and the packet's addresses and ports.
func (l *auditLog) record(p audit.PacketIn, now time.Time) (audit.Record, bool) {
	if len(p.UserData) != 1 {
		return audit.Record{}, false
	}
	src, okSrc := p.Addr(true)
	dst, okDst := p.Addr(false)
	if !okSrc || !okDst {
		return audit.Record{}, false
	}
	r := audit.Record{Time: now, Node: l.a.cfg.NodeName, Verdict: audit.VerdictOfCode(p.UserData[0]),
		SrcIP: src.String(), SrcPort: p.Port(true), DstIP: dst.String(), DstPort: p.Port(false), Protocol: p.Protocol()}
	cookie := pipeline.Cookie(p.Cookie)
	l.index()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch cookie.Category() {
	case pipeline.CategoryPolicy:
		switch cookie.PolicyKind() {
		case pipeline.PolicyKindRule:
			rule, ok := l.rules[cookie.Object()]
			if !ok {
				return r, false
			}
			r.Kind, r.Namespace, r.Name, r.Rule, r.Direction = "NetworkPolicy", rule.Policy.Namespace, rule.Policy.Name, rule.ID, string(rule.Direction)
		case pipeline.PolicyKindIngressDeny, pipeline.PolicyKindEgressDeny:
			pod, ok := l.a.state.podByOFPort(cookie.Object())
			if !ok {
				return r, false
			}
			r.Kind, r.Namespace, r.Rule, r.Direction = "NetworkPolicy", pod.Namespace, "default-deny", string(policy.Ingress)
			if cookie.PolicyKind() == pipeline.PolicyKindEgressDeny {
				r.Direction = string(policy.Egress)
			}
		default:
			return r, false
		}
	case pipeline.CategoryClusterPolicy:
		rule, ok := l.clusters[cookie.Object()]
		if !ok {
			return r, false
		}
		r.Kind, r.Name, r.Rule, r.Tier, r.Direction = "ClusterNetworkPolicy", rule.Policy, rule.ID, string(rule.Tier), string(rule.Direction)
		if rule.Name != "" {
			r.Rule = rule.Name
		}
	default:
		return r, false
	}
	return r, true
}

// index maps the current share's rules by their cookie object, once per share.
func (l *auditLog) index() {
	share := l.a.state.Policy()
	l.mu.Lock()
	defer l.mu.Unlock()
	if share == l.share {
		return
	}
	l.share, l.rules, l.clusters = share, map[uint32]policy.Rule{}, map[uint32]policy.ClusterRule{}
	if share == nil {
		return
	}
	for _, r := range share.Rules {
		l.rules[pipeline.PolicyRuleObjectID(r.ID)] = r
	}
	for _, r := range share.ClusterRules {
		l.clusters[pipeline.PolicyRuleObjectID(r.ID)] = r
	}
}

// podByOFPort is the local pod on ofport.
func (s *NodeState) podByOFPort(ofport uint32) (pipeline.PodPort, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		if p.OFPort == ofport {
			return p, true
		}
	}
	return pipeline.PodPort{}, false
}

// podByIP is the local pod with address ip.
func (s *NodeState) podByIP(ip netip.Addr) (pipeline.PodPort, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		for _, a := range p.IPs {
			if a == ip {
				return p, true
			}
		}
	}
	return pipeline.PodPort{}, false
}
