package harness

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// AuditCounts are kovs-controller's requests to kube-apiserver, as kube-apiserver's own
// audit log records them (sandbox --audit-kovs: every request of its ServiceAccount).
type AuditCounts struct {
	// PerPhase counts requests received during each phase (by name).
	PerPhase map[string]int
	// ByKind counts "verb resource[/subresource]" over the whole run, largest first.
	ByKind []KindCount
	Total  int
}

// KindCount is the number of requests of one verb and resource, and how long
// kube-apiserver took to answer them (received to response complete; watches excluded).
type KindCount struct {
	Kind    string
	Count   int
	Latency Durations
}

type auditEvent struct {
	Verb      string    `json:"verb"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	Completed time.Time `json:"stageTimestamp"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// readAudit counts the audit log's events per phase and per kind.
func readAudit(path string, phases []PhaseUsage) (AuditCounts, error) {
	c := AuditCounts{PerPhase: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	kinds := map[string]*KindCount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return c, fmt.Errorf("%s: %w", path, err)
		}
		c.Total++
		kind := e.Verb
		if e.ObjectRef != nil {
			kind += " " + e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				kind += "/" + e.ObjectRef.Subresource
			}
		}
		k := kinds[kind]
		if k == nil {
			k = &KindCount{Kind: kind}
			kinds[kind] = k
		}
		k.Count++
		if e.Verb != "watch" {
			k.Latency = append(k.Latency, e.Completed.Sub(e.Received))
		}
		for _, p := range phases {
			if !e.Received.Before(p.Start) && e.Received.Before(p.End) {
				c.PerPhase[p.Name]++
				break
			}
		}
	}
	for _, k := range kinds {
		c.ByKind = append(c.ByKind, *k)
	}
	slices.SortFunc(c.ByKind, func(a, b KindCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Kind, b.Kind)) })
	return c, sc.Err()
}
