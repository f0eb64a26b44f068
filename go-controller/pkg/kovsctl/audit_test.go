package kovsctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

func TestAuditFilters(t *testing.T) {
	at := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	records := []audit.Record{
		{Time: at, Node: "node1", Direction: "Ingress", Verdict: audit.Allow, Kind: "NetworkPolicy", Namespace: "x", Name: "web", Rule: "x/web/Ingress/0",
			SrcPod: "y/client", SrcIP: "10.244.2.5", SrcPort: 40000, DstPod: "x/web", DstIP: "10.244.1.6", DstPort: 80, Protocol: "TCP", Count: 1},
		{Time: at, Node: "node1", Direction: "Ingress", Verdict: audit.Deny, Kind: "NetworkPolicy", Namespace: "x", Rule: "default-deny",
			SrcPod: "y/other", SrcIP: "10.244.2.7", SrcPort: 40001, DstPod: "x/web", DstIP: "10.244.1.6", DstPort: 81, Protocol: "TCP", Count: 3},
		{Time: at, Node: "node1", Direction: "Egress", Verdict: audit.Deny, Kind: "ClusterNetworkPolicy", Name: "no-dns", Tier: "Admin", Rule: "dns",
			SrcPod: "y/client", SrcIP: "10.244.2.5", SrcPort: 5353, DstIP: "8.8.8.8", DstPort: 53, Protocol: "UDP", Count: 1},
	}
	var file bytes.Buffer
	for _, r := range records {
		b, _ := json.Marshal(r)
		file.Write(append(b, '\n'))
	}
	file.WriteString(`{"truncated`) // a line being written: not printed
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  AuditRequest
		want []string // a distinctive part of each line printed, in order
	}{
		{AuditRequest{}, []string{"x/web/Ingress/0", "default-deny", "rule dns"}},
		{AuditRequest{Pod: "y/client"}, []string{"x/web/Ingress/0", "rule dns"}},
		{AuditRequest{Pod: "x/web"}, []string{"x/web/Ingress/0", "default-deny"}},
		{AuditRequest{Policy: "x/web"}, []string{"x/web/Ingress/0"}},
		{AuditRequest{Policy: "x/"}, []string{"x/web/Ingress/0", "default-deny"}},
		{AuditRequest{Policy: "no-dns"}, []string{"Admin no-dns rule dns"}},
		{AuditRequest{Policy: "web"}, nil},
	} {
		tc.req.Path = path
		var out bytes.Buffer
		if err := Audit(context.Background(), tc.req, &out); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if out.Len() == 0 {
			lines = nil
		}
		if len(lines) != len(tc.want) {
			t.Errorf("%+v: %d lines, want %d:\n%s", tc.req, len(lines), len(tc.want), out.String())
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("%+v: line %d = %q, want it to contain %q", tc.req, i, lines[i], w)
			}
		}
	}
	var out bytes.Buffer
	if err := Audit(context.Background(), AuditRequest{Path: path, Policy: "x/"}, &out); err != nil || !strings.Contains(out.String(), "(x3)") ||
		!strings.Contains(out.String(), "y/other 10.244.2.7:40001 -> x/web 10.244.1.6:81 TCP") {
		t.Errorf("collapsed deny printed as:\n%s", out.String())
	}
	if err := Audit(context.Background(), AuditRequest{Path: filepath.Join(t.TempDir(), "none")}, &out); err == nil || !strings.Contains(err.Error(), audit.Annotation) {
		t.Errorf("a missing log: %v, want an error that says how the log comes to be", err)
	}
}
