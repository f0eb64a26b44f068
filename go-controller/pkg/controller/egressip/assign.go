// Package egressip is kovs-controller's side of Egress: it assigns each Egress's IPs to a
// healthy node its node selector allows, keeps it there while that node stays healthy,
// moves it when the node fails (its agent's heartbeat Lease expires, or the Node is not
// Ready or gone) and records the holder, the Egress's tunnel ID and an Assigned condition
// in the status.
package egressip

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/kovs-net/kovs/go-controller/pkg/egress"
)

// Node is what assignment knows of a node.
type Node struct {
	Name    string
	Labels  map[string]string
	Healthy bool
	// CIDRs are the networks of its interfaces (from its heartbeat Lease): it can hold an
	// egress IP inside one of them.
	CIDRs []netip.Prefix
	// Addresses are its own addresses (an egress IP must not be one).
	Addresses []netip.Addr
}

// Holder is the node holding an Egress ("": none) and the Egress's ID.
type Holder struct {
	Node string
	ID   uint32
}

// Decision is the status an Egress should have.
type Decision struct {
	Name   string
	Status Holder
	// Assigned, Reason and Message make the Assigned condition.
	Assigned        bool
	Reason, Message string
}

// Assign decides every Egress's holder and ID. An Egress keeps its holder while that node
// is healthy and still eligible, and its ID while no Egress earlier by name has it; the
// others go to the eligible healthy node holding the fewest Egresses (by name on ties).
// Egresses with invalid specs, or whose IPs an Egress earlier by name has, are not
// assigned.
func Assign(egresses []*egress.Egress, nodes []Node, cluster []netip.Prefix) []Decision {
	egresses = slices.Clone(egresses)
	slices.SortFunc(egresses, func(a, b *egress.Egress) int { return cmp.Compare(a.Name, b.Name) })
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]Decision, len(egresses))
	ips := make([][]netip.Addr, len(egresses))
	owner := map[netip.Addr]string{}
	usedIDs := map[uint32]bool{}
	load := map[string]int{}
	for i, e := range egresses {
		out[i] = Decision{Name: e.Name}
		var err error
		if err = e.Spec.Validate(); err == nil {
			ips[i], err = e.Spec.IPs(cluster)
		}
		if err == nil {
			err = takenBy(ips[i], owner, nodes)
		}
		if err != nil {
			out[i].Reason, out[i].Message = egress.ReasonInvalid, err.Error()
			if _, conflict := err.(conflictError); conflict {
				out[i].Reason = egress.ReasonConflict
			}
			ips[i] = nil
			continue
		}
		for _, ip := range ips[i] {
			owner[ip] = e.Name
		}
		if id := e.Status.ID; id != 0 && id <= egress.MaxID && !usedIDs[id] {
			out[i].Status.ID, usedIDs[id] = id, true
		}
		if n, ok := find(nodes, e.Status.Node); ok && eligible(n, e, ips[i]) {
			out[i].Status.Node = n.Name
			load[n.Name]++
		}
	}
	next := uint32(1)
	for i, e := range egresses {
		if ips[i] == nil {
			continue
		}
		if out[i].Status.ID == 0 {
			for usedIDs[next] {
				next++
			}
			if next > egress.MaxID {
				out[i].Reason, out[i].Message = egress.ReasonInvalid, fmt.Sprintf("more than %d Egresses", egress.MaxID)
				continue
			}
			out[i].Status.ID, usedIDs[next] = next, true
		}
		if out[i].Status.Node == "" {
			best := -1
			for j, n := range nodes {
				if eligible(n, e, ips[i]) && (best < 0 || load[n.Name] < load[nodes[best].Name]) {
					best = j
				}
			}
			if best < 0 {
				out[i].Reason = egress.ReasonNoNode
				out[i].Message = "no healthy node that spec.nodeSelector allows has an interface on the egress IPs' networks"
				continue
			}
			out[i].Status.Node = nodes[best].Name
			load[nodes[best].Name]++
		}
		out[i].Assigned, out[i].Reason = true, egress.ReasonAssigned
		out[i].Message = fmt.Sprintf("%v held by node %s", ips[i], out[i].Status.Node)
	}
	return out
}

type conflictError struct{ error }

// takenBy refuses IPs another Egress has, or that are a node's own.
func takenBy(ips []netip.Addr, owner map[netip.Addr]string, nodes []Node) error {
	for _, ip := range ips {
		if other, ok := owner[ip]; ok {
			return conflictError{fmt.Errorf("egress IP %s is Egress %s's", ip, other)}
		}
		for _, n := range nodes {
			if slices.Contains(n.Addresses, ip) {
				return conflictError{fmt.Errorf("egress IP %s is node %s's own address", ip, n.Name)}
			}
		}
	}
	return nil
}

func eligible(n Node, e *egress.Egress, ips []netip.Addr) bool {
	return n.Healthy && e.Spec.AllowsNode(n.Labels) && egress.CanHold(n.CIDRs, ips)
}

func find(nodes []Node, name string) (Node, bool) {
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.Name == name })
	if i < 0 {
		return Node{}, false
	}
	return nodes[i], true
}
