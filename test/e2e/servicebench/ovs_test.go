package servicebench_test

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/pipeline"
)

// ovsState is a node's br-int: its flows (without cookie and counters, with their
// cookie) and its groups, as text.
type ovsState struct {
	flows  map[string]uint64
	groups map[string]bool
}

// ovsCount is what a node's br-int holds: kovs-owned flows, by cookie category, and groups.
type ovsCount struct {
	flows      int
	byCategory map[pipeline.Category]int
	groups     int
}

// dumpOVS reads node's flows and groups with ovs-ofctl.
func (c *bench) dumpOVS(b *testing.B, node string) ovsState {
	st := ovsState{flows: map[string]uint64{}, groups: map[string]bool{}}
	for _, f := range c.s.DumpFlows(b, node) {
		st.flows[f.Text] = f.Cookie
	}
	for _, g := range c.s.DumpGroups(b, node) {
		st.groups[g] = true
	}
	return st
}

// count counts the kovs-owned flows (by cookie) and the groups.
func (st ovsState) count() ovsCount {
	n := ovsCount{byCategory: map[pipeline.Category]int{}, groups: len(st.groups)}
	for _, v := range st.flows {
		if c := pipeline.Cookie(v); c.Owned() {
			n.flows++
			n.byCategory[c.Category()]++
		}
	}
	return n
}

// diff counts the flows and the groups that differ between two states: added, removed or
// rewritten, each once (a flow is keyed by its table, priority and match, a group by its
// ID): the OpenFlow mods a bundle needed at least to go from one to the other.
func (st ovsState) diff(after ovsState) (flows, groups int) {
	return changedKeys(keys(st.flows), keys(after.flows), flowKey), changedKeys(st.groups, after.groups, groupKey)
}

func keys(m map[string]uint64) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// flowKey is a flow's table, priority and match (what an OpenFlow flow mod replaces).
func flowKey(text string) string {
	key, _, _ := strings.Cut(text, " actions=")
	return key
}

// groupKey is a group's group_id=N.
func groupKey(line string) string {
	key, _, _ := strings.Cut(line, ",")
	return key
}

func changedKeys(before, after map[string]bool, keyOf func(string) string) int {
	index := func(m map[string]bool) map[string]string {
		out := map[string]string{}
		for line := range m {
			out[keyOf(line)] += line + "\n"
		}
		return out
	}
	a, b := index(before), index(after)
	n := 0
	for k, v := range a {
		if b[k] != v {
			n++
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			n++
		}
	}
	return n
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// linesAfter reads the lines of a file from offset on.
func linesAfter(path string, offset int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// intField is the integer value of key=N in a logfmt line, 0 if absent.
func intField(line, key string) int {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
