package kovsctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kovs-net/kovs/go-controller/pkg/audit"
)

// DefaultAuditLog is where kovs-agent writes a node's policy audit log (dist/agent.yaml).
const DefaultAuditLog = "/var/log/kovs/audit.log"

// AuditRequest selects lines of a node's audit log (docs/audit.md).
type AuditRequest struct {
	// Path is the log (default DefaultAuditLog); kovsctl audit runs on the node.
	Path string
	// Follow keeps reading what is appended, across rotations, until ctx ends.
	Follow bool
	// Pod (namespace/name) keeps the lines whose source or destination it is.
	Pod string
	// Policy keeps the lines of a policy: a ClusterNetworkPolicy's name, or a
	// NetworkPolicy's namespace/name (a namespace/ alone: its namespace's default denies
	// and policies).
	Policy string
	// JSON prints the lines as the log has them.
	JSON bool
}

// Matches reports whether the request keeps r.
func (q AuditRequest) Matches(r audit.Record) bool {
	if q.Pod != "" && r.SrcPod != q.Pod && r.DstPod != q.Pod {
		return false
	}
	if q.Policy == "" {
		return true
	}
	if ns, name, ok := strings.Cut(q.Policy, "/"); ok {
		return r.Kind == "NetworkPolicy" && r.Namespace == ns && (name == "" || r.Name == name)
	}
	return r.Kind == "ClusterNetworkPolicy" && r.Name == q.Policy
}

// Audit prints the audit log's lines that q keeps.
func Audit(ctx context.Context, q AuditRequest, w io.Writer) error {
	if q.Path == "" {
		q.Path = DefaultAuditLog
	}
	f, err := os.Open(q.Path)
	if err != nil {
		return fmt.Errorf("audit log: %w (on a node, kovs-agent writes it to %s when a Namespace or ClusterNetworkPolicy is annotated %s; elsewhere pass --file)",
			err, DefaultAuditLog, audit.Annotation)
	}
	defer func() { f.Close() }()
	r := bufio.NewReader(f)
	var partial string
	for {
		line, err := r.ReadString('\n')
		if err == nil {
			printAuditLine(q, partial+line, w)
			partial = ""
			continue
		}
		if err != io.EOF {
			return fmt.Errorf("audit log: %w", err)
		}
		partial += line
		if !q.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		// Rotated: the path names a new file; finish the old one first (done: at EOF).
		if rotated(f, q.Path) {
			nf, err := os.Open(q.Path)
			if err == nil {
				f.Close()
				f, r, partial = nf, bufio.NewReader(nf), ""
			}
		}
	}
}

func rotated(f *os.File, path string) bool {
	cur, err1 := f.Stat()
	now, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && !os.SameFile(cur, now)
}

func printAuditLine(q AuditRequest, line string, w io.Writer) {
	var r audit.Record
	if err := json.Unmarshal([]byte(line), &r); err != nil || !q.Matches(r) {
		return
	}
	if q.JSON {
		fmt.Fprint(w, line)
		return
	}
	fmt.Fprintln(w, FormatAuditRecord(r))
}

// FormatAuditRecord is one line for people: when, where, the verdict and who decided,
// and the connection.
func FormatAuditRecord(r audit.Record) string {
	policy := r.Name
	if r.Kind == "NetworkPolicy" {
		policy = r.Namespace + "/" + r.Name
	}
	if r.Tier != "" {
		policy = r.Tier + " " + policy
	}
	end := func(pod, ip string, port uint16) string {
		s := ip
		if port != 0 {
			s = fmt.Sprintf("%s:%d", ip, port)
			if strings.Contains(ip, ":") {
				s = fmt.Sprintf("[%s]:%d", ip, port)
			}
		}
		if pod != "" {
			s = pod + " " + s
		}
		return s
	}
	count := ""
	if r.Count > 1 {
		count = fmt.Sprintf(" (x%d)", r.Count)
	}
	return fmt.Sprintf("%s %s %-5s %s %s rule %s %s: %s -> %s %s%s", r.Time.Format(time.RFC3339Nano), r.Node, r.Verdict, r.Kind, policy,
		r.Rule, r.Direction, end(r.SrcPod, r.SrcIP, r.SrcPort), end(r.DstPod, r.DstIP, r.DstPort), r.Protocol, count)
}
