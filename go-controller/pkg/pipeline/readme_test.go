package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEDocumentsThePipeline keeps ovs-flows/README.md in step with the declarations:
// every table (number, name, miss), every register field and every cookie category.
func TestREADMEDocumentsThePipeline(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "ovs-flows", "README.md"))
	if err != nil {
		t.Fatalf("read README: %v", err)
	}
	readme := string(text)
	for _, tbl := range Tables() {
		if row := tableRow(readme, tbl); row == "" {
			t.Errorf("README table reference has no row for %d %s (phase %s)", tbl.ID, tbl.Name, tbl.Phase)
		} else if miss := readmeMiss(tbl); !strings.HasSuffix(row, "| "+miss+" |") {
			t.Errorf("README says %s misses otherwise than %q: %s", tbl.Name, miss, row)
		}
	}
	for _, f := range []RegField{PortClassField, OutPortField, NeighborScratchField, AffinityHitField, EndpointKeyField, ServiceGroupField} {
		row := fmt.Sprintf("| `reg%d[%d..%d]` | %s |", f.Reg, f.Start, f.End, f.Name)
		if !strings.Contains(readme, row) {
			t.Errorf("README register map lacks %q", row)
		}
	}
	if !strings.Contains(readme, fmt.Sprintf("zone=%d", CTZone)) || !strings.Contains(readme, fmt.Sprintf("tun_id=%d", TunnelVNI)) {
		t.Error("README: conntrack zone or VNI out of date")
	}
}

// tableRow is the README's table-reference row of tbl.
func tableRow(readme string, tbl Table) string {
	prefix := fmt.Sprintf("| %d | %s | %s |", tbl.ID, tbl.Name, tbl.Phase)
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func readmeMiss(t Table) string {
	switch t.Miss {
	case MissNext:
		return "next"
	case MissJump:
		next, _ := t.missTarget()
		return "goto " + next.Name
	}
	return "drop"
}
