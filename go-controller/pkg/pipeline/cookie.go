package pipeline

import (
	"fmt"
	"hash/fnv"
	"net/netip"
)

// Cookie says who owns a flow. Layout (64 bits):
//
//	bits 63..48  Round     agent incarnation that installed the flow
//	bits 47..40  Category  kind of owner: pipeline base, gateway, pod, tunnel peer, ...;
//	                       bit 47 set: a flow the switch learned (CategoryLearned)
//	bits 39..32  Kind      what a NetworkPolicy flow is (PolicyKind); zero otherwise
//	bits 31..0   Object    owner within the category: a pod's ofport, a peer's name hash,
//	                       a policy rule's ID hash
//
// A flow with category 0 is not kovs's: the agent never deletes it by cookie.
type Cookie uint64

// Round is an agent incarnation. The agent stores it in OVSDB and bumps it on start; after
// reinstalling every flow with the new round it deletes the flows of older rounds.
type Round uint16

// Category is the kind of object that owns a flow.
type Category uint8

// Cookie categories: one per stage of the pipeline (Stages), and the learned flows'.
const (
	CategoryBase       Category = 1 // table-miss flows and node-independent plumbing
	CategoryGateway    Category = 2 // the gateway port, node addresses, off-cluster routing
	CategoryPod        Category = 3 // one local pod (object: ofport)
	CategoryTunnelPeer Category = 4 // one remote node (object: FNV-1a of its name)
	CategoryPolicy     Category = 5 // NetworkPolicy (kind: PolicyKind; object: rule hash or ofport)
	CategoryService    Category = 6 // Service load balancing (object: ServiceObjectID, 0 for hairpin flows)
	// CategoryLearned: flows the switch installs itself, with a learn action (SCTP
	// replies and translations, Service affinity). It is the category's top bit, which no
	// stage's category has: the agent never installs these flows, and its full resync
	// dumps only the flows without the bit (InstalledFilter), so however many flows the
	// pods make the switch learn, the agent never reads them.
	CategoryLearned Category = 0x80
	CategoryEgress  Category = 8 // Egress IPs (object: a selected pod's ofport, 65536 + a held Egress's ID, 0 exclusions)
	// CategoryClusterPolicy: ClusterNetworkPolicy (kind: ClusterKind; object: rule hash).
	CategoryClusterPolicy Category = 9
)

const (
	roundShift    = 48
	categoryShift = 40
	kindShift     = 32
	roundMask     = Cookie(0xffff) << roundShift
	categoryMask  = Cookie(0xff) << categoryShift
	kindMask      = Cookie(0xff) << kindShift
	objectMask    = Cookie(0xffffffff)
)

// NewCookie builds the cookie of a flow owned by object obj of category cat, installed in
// round r.
func NewCookie(r Round, cat Category, obj uint32) Cookie {
	return Cookie(r)<<roundShift | Cookie(cat)<<categoryShift | Cookie(obj)
}

// Round is the agent incarnation that installed the flow.
func (c Cookie) Round() Round { return Round(c >> roundShift) }

// Category is the kind of owner.
func (c Cookie) Category() Category { return Category(c >> categoryShift) }

// Object is the owner within its category.
func (c Cookie) Object() uint32 { return uint32(c & objectMask) }

// Owned reports whether kovs owns the flow (its category is set).
func (c Cookie) Owned() bool { return c.Category() != 0 }

// IsStale reports whether the flow is kovs's and was installed by a round other than
// current. OpenFlow matches cookies by value under a mask, which cannot say "round is not
// R"; so the agent either deletes each older round it knows of (RoundFilter) or dumps the
// flows and filters them with IsStale.
func (c Cookie) IsStale(current Round) bool { return c.Owned() && c.Round() != current }

func (c Cookie) String() string { return fmt.Sprintf("%#x", uint64(c)) }

// CookieFilter selects flows by cookie=Value/Mask, the form ovs-ofctl's dump-flows and
// del-flows and OpenFlow flow-mod delete take.
type CookieFilter struct {
	Value Cookie
	Mask  Cookie
}

// String renders the filter as ovs-ofctl takes it: "0x1000000000000/0xffff000000000000".
func (f CookieFilter) String() string {
	return fmt.Sprintf("%#x/%#x", uint64(f.Value), uint64(f.Mask))
}

// Matches reports whether c is selected by the filter.
func (f CookieFilter) Matches(c Cookie) bool { return c&f.Mask == f.Value&f.Mask }

// RoundFilter selects every kovs flow of round r, whatever its owner.
func RoundFilter(r Round) CookieFilter {
	return CookieFilter{Value: NewCookie(r, 0, 0), Mask: roundMask}
}

// CategoryFilter selects every flow of category cat, of any round.
func CategoryFilter(cat Category) CookieFilter {
	return CookieFilter{Value: NewCookie(0, cat, 0), Mask: categoryMask}
}

// ObjectFilter selects every flow of one owner, of any round.
func ObjectFilter(cat Category, obj uint32) CookieFilter {
	return CookieFilter{Value: NewCookie(0, cat, obj), Mask: categoryMask | objectMask}
}

// Learned reports whether the switch installed the flow with a learn action
// (CategoryLearned): the agent's flow sync must neither expect nor delete it.
func (c Cookie) Learned() bool { return c.Category()&CategoryLearned != 0 }

// InstalledFilter selects the flows that are no learned flows: the agent's (every
// stage's category is below CategoryLearned) and flows of category 0, which are not
// kovs's. What the flow sync dumps.
func InstalledFilter() CookieFilter {
	return CookieFilter{Value: 0, Mask: Cookie(CategoryLearned) << categoryShift}
}

// LearnedFilter selects every learned flow, of any round.
func LearnedFilter() CookieFilter { return CategoryFilter(CategoryLearned) }

// Kinds of learned flows, in the cookie's bits 39..32: what a learned flow does decides
// when the agent deletes it.
const (
	// learnedKindReply: SCTPReply's flows (object 0), which let an association's replies
	// skip policy; deleted after every policy change (LearnedReplyFilter).
	learnedKindReply = 0
	// learnedKindTranslation: SCTPPin's and SCTPUnNAT's flows, which only translate an
	// association to a stateless SCTP Service port (policy still sees every packet). The
	// object is SCTPTranslationObjectID of the port and endpoint; they outlive policy
	// changes and are deleted when the endpoint leaves the port's EndpointSlices
	// (SCTPTranslationFilter).
	learnedKindTranslation = 1
	// learnedKindAffinity: ServiceAffinity's flows (object 0), a client's endpoint of a
	// Service with sessionAffinity ClientIP; they expire on their own.
	learnedKindAffinity = 2
)

// affinityCookie is the cookie of learned Service affinity flows.
func affinityCookie() Cookie {
	return NewCookie(0, CategoryLearned, 0) | learnedKindAffinity<<kindShift
}

// LearnedReplyFilter selects the learned flows that let replies skip policy, of any round.
func LearnedReplyFilter() CookieFilter {
	return CookieFilter{Value: NewCookie(0, CategoryLearned, 0), Mask: categoryMask | kindMask | objectMask}
}

// SCTPTranslationKey names the learned translations to endpoint ep of stateless port p:
// "<port name>|<ClusterIP>|<ep>".
func SCTPTranslationKey(p ServicePort, ep netip.AddrPort) string {
	return p.Name + "|" + p.ClusterIP.String() + "|" + ep.String()
}

// SCTPTranslationObjectID is the cookie object of the learned translations to endpoint ep
// of stateless port p: FNV-1a of SCTPTranslationKey. Two may collide; deleting one's
// translations then also moves the other's associations to a new endpoint.
func SCTPTranslationObjectID(p ServicePort, ep netip.AddrPort) uint32 {
	return PeerObjectID(SCTPTranslationKey(p, ep))
}

// sctpTranslationCookie is the cookie of the learned translations to ep of p.
func sctpTranslationCookie(r Round, p ServicePort, ep netip.AddrPort) Cookie {
	return NewCookie(r, CategoryLearned, SCTPTranslationObjectID(p, ep)) | learnedKindTranslation<<kindShift
}

// SCTPTranslationFilter selects the learned translations to endpoint ep of stateless port
// p, of any round.
func SCTPTranslationFilter(p ServicePort, ep netip.AddrPort) CookieFilter {
	return CookieFilter{Value: sctpTranslationCookie(0, p, ep), Mask: categoryMask | kindMask | objectMask}
}

// LearnedTranslation reports whether the flow is a learned translation of a stateless
// SCTP Service port (SCTPPin, SCTPUnNAT).
func (c Cookie) LearnedTranslation() bool {
	return c.Learned() && (c&kindMask)>>kindShift == learnedKindTranslation
}

// LearnedAffinity reports whether the flow is a learned Service affinity (ServiceAffinity).
func (c Cookie) LearnedAffinity() bool {
	return c.Learned() && (c&kindMask)>>kindShift == learnedKindAffinity
}

// PolicyKind is what a NetworkPolicy flow (CategoryPolicy) does, in the cookie's bits
// 39..32. The object is a rule's PolicyRuleObjectID for rule and clause flows, and a
// pod's ofport for default-deny flows.
type PolicyKind uint8

// Kinds of NetworkPolicy flows.
const (
	// PolicyKindRule: a rule's allow flow (its conj_id flow, or its only clause).
	PolicyKindRule PolicyKind = 1
	// PolicyKindClause: a conjunction clause, shared by every rule with the same clause;
	// the object names the first of them (lowest rule ID).
	PolicyKindClause PolicyKind = 2
	// PolicyKindIngressDeny, PolicyKindEgressDeny: the default deny of a pod isolated
	// for that direction.
	PolicyKindIngressDeny PolicyKind = 3
	PolicyKindEgressDeny  PolicyKind = 4
	// PolicyKindPending: the default deny, both directions, of a pod kovs-controller has
	// not evaluated yet (its NetworkPolicy has not arrived).
	PolicyKindPending PolicyKind = 5
)

func (k PolicyKind) String() string {
	switch k {
	case PolicyKindRule:
		return "rule"
	case PolicyKindClause:
		return "clause"
	case PolicyKindIngressDeny:
		return "ingress default deny"
	case PolicyKindEgressDeny:
		return "egress default deny"
	case PolicyKindPending:
		return "default deny pending policy"
	}
	return fmt.Sprintf("policy kind %d", uint8(k))
}

// NewPolicyCookie builds the cookie of a NetworkPolicy flow of kind k owned by obj.
func NewPolicyCookie(r Round, k PolicyKind, obj uint32) Cookie {
	return NewCookie(r, CategoryPolicy, obj) | Cookie(k)<<kindShift
}

// PolicyKind is what a NetworkPolicy flow does; zero for other categories.
func (c Cookie) PolicyKind() PolicyKind {
	if c.Category() != CategoryPolicy {
		return 0
	}
	return PolicyKind((c & kindMask) >> kindShift)
}

// PolicyRuleObjectID is the cookie object of a NetworkPolicy rule's flows: FNV-1a of its
// ID (policy.Rule.ID, "<namespace>/<policy>/<ingress|egress>/<index>[/<proto>-<port>]"),
// so that tools can name the rule from the API objects alone.
func PolicyRuleObjectID(ruleID string) uint32 { return PeerObjectID(ruleID) }

// PeerObjectID is the cookie object of a tunnel peer: FNV-1a of its node name. Two peers
// may collide; the cookie then still names the category and round, and reconcilers delete
// a peer's flows by their (table, priority, match), never by object alone.
func PeerObjectID(nodeName string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(nodeName))
	return h.Sum32()
}
