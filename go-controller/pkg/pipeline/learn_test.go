package pipeline

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// TestEveryLearnedTableIsBounded: every table a learn action of the reference scenarios
// writes to is in LearnedTables, which the agent bounds in OVS, and only such tables are:
// a new learn action cannot make an unbounded table (issue 14).
func TestEveryLearnedTableIsBounded(t *testing.T) {
	_, flows, _ := serviceScenario(t)
	flows = append(flows, threeNodesDualStack(1).flows(t)...)
	learnTo := regexp.MustCompile(`learn\(table=(\d+)`)
	learned := map[uint8]bool{}
	for _, f := range flows {
		for _, m := range learnTo.FindAllStringSubmatch(f.String(), -1) {
			id, _ := strconv.Atoi(m[1])
			learned[uint8(id)] = true
		}
	}
	var bounded []uint8
	for _, lt := range LearnedTables() {
		bounded = append(bounded, lt.Table.ID)
		if len(lt.GroupBy) == 0 {
			t.Errorf("learned table %s has no eviction groups: a flooder would evict everyone's flows alike", lt.Table.Name)
		}
	}
	for id := range learned {
		if !slices.Contains(bounded, id) {
			t.Errorf("table %d gets learned flows but is not in LearnedTables: it would grow without bound", id)
		}
	}
	for _, id := range bounded {
		if !learned[id] {
			t.Errorf("LearnedTables bounds table %d, which no learn action writes", id)
		}
	}
}
