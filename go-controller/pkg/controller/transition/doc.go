// Package transition is the transition gate of kovs-controller: it stands between the
// NetworkPolicy compiler and everything that receives a node's share (the agents'
// streams, the realization tracker), so that a policy change never opens, across nodes,
// what every state the API passed through denied.
//
// A connection between pods of two nodes passes the egress policy of one node and the
// ingress policy of the other. Nodes realize their shares on their own clocks, so a write
// that restricts on node A followed by one that relaxes on node B (a make-before-break
// migration) would, sent as compiled, leave a moment where B has relaxed and A has not
// yet restricted: a connection neither state allowed goes through.
//
// The gate moves every node through the meet of what it was sent and its new share (see
// meet.go: a share that allows only what both allow), and sends a node its new share
// (its relaxation) only once every meet that changed anything, on any node, sent up to
// the cut that last changed that node (the relaxation's epoch) has been reported
// realized. Later cuts are taken meanwhile: their meets go out at once and their
// relaxations wait for them, so that up to the last epoch whose relaxations went out,
// every node is at or below its share of that cut, and no combination of nodes allows
// what no single state of the API allowed. A node changed again while its relaxation
// waits has it moved to the later epoch; once a relaxation has waited cutWhileWaiting,
// no cut is taken until it goes out. A change that only restricts is complete with its
// meet; one that only relaxes has a meet equal to what was sent and goes out at once
// when no restriction before it is waiting (a new pod's addresses, a new pod listed on
// its node). TestNoWindowAcrossNodes and TestNoWindowWhileRelaxationsWait check the
// guarantee against random writes, reports and failovers.
//
// A node that does not report its restriction within the timeout is held: it gets no
// relaxation until it reports (fail closed) and stops holding up the others, and the
// controller logs its name; the realization status of the policies it concerns shows it
// behind. Shares a node's receivers have been sent survive a reconnect of its agent (the
// tracker keeps following every node), so a reconnecting agent gets the share the gate
// last sent, never a relaxation ahead of the others' restrictions.
//
// A gate that starts (a controller that starts leading) does not know what the nodes
// enforce: the first share it sends a node carries MeetPrevious, so the agent meets it
// with its previous share, and the gate releases all such nodes together once each has
// realized its first share (or been held).
//
// The nodes that hold one address set hold one list of it: the gate patches, meets,
// compares and diffs a set once per cut and shares the result between its nodes
// (policy.SetMemo), where a set all n nodes hold cost O(n) per node and a copy each.
//
// Generations are the gate's own, one per step that changed some node's share, counted
// from Options.Base.
package transition
