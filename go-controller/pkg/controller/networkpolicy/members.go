package networkpolicy

import "slices"

// smallMembers is the size up to which a memberSet is a plain slice. Most groups (a
// policy per app in a namespace) have a few members; indexing them by node would cost
// more than scanning them.
const smallMembers = 16

// memberSet holds a group's members and answers, per node, which of them are there. The
// unscheduled members are under the nil node.
type memberSet struct {
	list   []*pod           // every member, while byNode is nil
	byNode map[*node][]*pod // the members by node, once the set is large
	size   int
}

// add adds p and reports whether it is the first member on its node.
func (s *memberSet) add(p *pod) bool {
	s.size++
	if s.byNode == nil {
		first := !s.hasSmall(p.node)
		s.list = append(s.list, p)
		if s.size > smallMembers {
			s.index()
		}
		return first
	}
	list := s.byNode[p.node]
	s.byNode[p.node] = append(list, p)
	return len(list) == 0
}

// remove removes p and reports whether it was the last member on its node.
func (s *memberSet) remove(p *pod) bool {
	if s.byNode == nil {
		if i := slices.Index(s.list, p); i >= 0 {
			s.list = swapRemove(s.list, i)
			s.size--
		}
		return !s.hasSmall(p.node)
	}
	list := s.byNode[p.node]
	if i := slices.Index(list, p); i >= 0 {
		list = swapRemove(list, i)
		s.size--
	}
	if len(list) == 0 {
		delete(s.byNode, p.node)
		return true
	}
	s.byNode[p.node] = list
	return false
}

func swapRemove(list []*pod, i int) []*pod {
	last := len(list) - 1
	list[i] = list[last]
	list[last] = nil
	return list[:last]
}

func (s *memberSet) hasSmall(n *node) bool {
	return slices.ContainsFunc(s.list, func(p *pod) bool { return p.node == n })
}

func (s *memberSet) index() {
	s.byNode = make(map[*node][]*pod, len(s.list))
	for _, p := range s.list {
		s.byNode[p.node] = append(s.byNode[p.node], p)
	}
	s.list = nil
}

// on returns the members on node n.
func (s *memberSet) on(n *node) []*pod {
	if s.byNode != nil {
		return s.byNode[n]
	}
	var out []*pod
	for _, p := range s.list {
		if p.node == n {
			out = append(out, p)
		}
	}
	return out
}

// nodes calls f once for every node (not nil) that has members.
func (s *memberSet) nodes(f func(*node)) {
	if s.byNode != nil {
		for n := range s.byNode {
			if n != nil {
				f(n)
			}
		}
		return
	}
	for i, p := range s.list {
		if p.node != nil && !slices.ContainsFunc(s.list[:i], func(q *pod) bool { return q.node == p.node }) {
			f(p.node)
		}
	}
}

// each calls f for every member.
func (s *memberSet) each(f func(*pod)) {
	if s.byNode == nil {
		for _, p := range s.list {
			f(p)
		}
		return
	}
	for _, list := range s.byNode {
		for _, p := range list {
			f(p)
		}
	}
}
