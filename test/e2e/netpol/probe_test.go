package netpol_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kovs-net/kovs/test/e2e/netpol/policymodel"
)

const (
	// probeTimeout is how long a round's probe waits for an answer before it counts the
	// cell denied. Allowed cells answer in milliseconds; a round lasts about this long,
	// since every denied cell waits it out (many at a time).
	probeTimeout = 500 * time.Millisecond
	// slowTimeout is the second chance of an allowed cell that did not answer within
	// probeTimeout: on a loaded machine the userspace datapath's first packets of a
	// connection can take longer. A cell NetworkPolicy drops never answers, however long
	// it is given; a cell expected denied is never probed again.
	slowTimeout = 3 * time.Second
	// probeParallel bounds the probes of a round in flight at once.
	probeParallel = 256
	// watchTimeout and watchParallel are the same for the continuous probes of the cells
	// that must stay denied while a step is applied: short, so each cell is tried often.
	watchTimeout  = 250 * time.Millisecond
	watchParallel = 8
	// maxViolations bounds the violations a watch keeps for the report.
	maxViolations = 20
)

// targets are the pods as cells name them, and the pods by key.
func (m *modelCluster) targets(pods []*corev1.Pod) ([]target, map[string]*corev1.Pod) {
	var out []target
	byKey := map[string]*corev1.Pod{}
	for _, p := range pods {
		var ports []corev1.ContainerPort
		for _, c := range p.Spec.Containers {
			ports = append(ports, c.Ports...)
		}
		out = append(out, target{key: key(p), ports: ports})
		byKey[key(p)] = p
	}
	return out, byKey
}

// probeCell probes one cell once, from a source port the pod has not used lately.
func (m *modelCluster) probeCell(c cellKey, byKey map[string]*corev1.Pod, timeout time.Duration) outcome {
	from, to := byKey[c.From], byKey[c.To]
	dst, err := m.destination(to, c.IPv6)
	if err != nil {
		return outcome{err: err.Error()}
	}
	return classify(m.s.ProbeFromPort(from, dst, c.Port, m.ports.next(c.From), timeout), c.To)
}

// Source ports of probes: each pod goes round [firstSourcePort, lastSourcePort], below the
// kernel's ephemeral range, so no probe shares its addresses and ports with a recent one.
// An earlier probe's conntrack entry (an allowed connection, committed) would otherwise
// let a new probe of the same tuple through as part of that connection after a policy
// closed the cell; a pod sends far fewer probes than the range holds in the minutes
// conntrack remembers one.
const (
	firstSourcePort = 10000
	lastSourcePort  = 32767
)

// sourcePorts hands out the source ports of each pod's probes.
type sourcePorts struct {
	mu   sync.Mutex
	last map[string]uint16
}

func (p *sourcePorts) next(pod string) uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]uint16{}
	}
	n := p.last[pod] + 1
	if n < firstSourcePort || n > lastSourcePort {
		n = firstSourcePort
	}
	p.last[pod] = n
	return n
}

// probe probes every cell once, many at a time.
func (m *modelCluster) probe(t *testing.T, cells []cellKey, byKey map[string]*corev1.Pod, timeout time.Duration) observed {
	t.Helper()
	got := make(observed, len(cells))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, probeParallel)
	for _, c := range cells {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o := m.probeCell(c, byKey, timeout)
			mu.Lock()
			got[c] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

// reprobeSlow probes again, with slowTimeout, the cells expected allowed that did not
// answer, and records what they answer now; it returns how many answered this time.
func (m *modelCluster) reprobeSlow(t *testing.T, got observed, want map[cellKey]bool, byKey map[string]*corev1.Pod) int {
	t.Helper()
	var slow []cellKey
	for _, c := range got.mismatches(want) {
		if want[c] && !got[c].allowed {
			slow = append(slow, c)
		}
	}
	if len(slow) == 0 {
		return 0
	}
	again := m.probe(t, slow, byKey, slowTimeout)
	answered := 0
	for _, c := range slow {
		got[c] = again[c]
		if again[c].allowed {
			answered++
		}
	}
	return answered
}

// alwaysDenied lists the cells that are denied before the step, after each of its writes
// and after it: the model's verdict in each state the cluster passes through, and the
// case's expectation at the end (TestCasesAgreeWithModel holds the two to agreeing). A
// cell the model cannot decide in some state is not watched.
func (m *modelCluster) alwaysDenied(t *testing.T, what string, writes []write, cells []cellKey, want map[cellKey]bool) []cellKey {
	t.Helper()
	cluster := m.liveCluster(t)
	var denied []cellKey
	for _, c := range cells {
		if !want[c] {
			denied = append(denied, c)
		}
	}
	keep := func() {
		var still []cellKey
		for _, c := range denied {
			if v, err := modelVerdicts(cluster, []cellKey{c}); err == nil && !v[c] {
				still = append(still, c)
			}
		}
		denied = still
	}
	keep()
	for _, w := range writes {
		if err := w.applyTo(cluster); err != nil {
			t.Fatalf("%s: %s in the model: %v", what, w, err)
		}
		keep()
	}
	return denied
}

// deniedWatch probes cells continuously until finished: each must be dropped every time.
type deniedWatch struct {
	stop       chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	probes     int
	bad        int
	violations []string // the first maxViolations of them
}

// watchDenied starts probing cells, each worker going round its share of them.
func (m *modelCluster) watchDenied(cells []cellKey, byKey map[string]*corev1.Pod) *deniedWatch {
	w := &deniedWatch{stop: make(chan struct{})}
	workers := min(watchParallel, len(cells))
	for i := range workers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for n := i; ; n += workers {
				select {
				case <-w.stop:
					return
				default:
				}
				c := cells[n%len(cells)]
				start := time.Now()
				o := m.probeCell(c, byKey, watchTimeout)
				w.record(c, o, start)
			}
		}()
	}
	return w
}

func (w *deniedWatch) record(c cellKey, o outcome, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probes++
	if !o.allowed && o.err == "" {
		return
	}
	w.bad++
	if len(w.violations) < maxViolations {
		what := "connected"
		if o.err != "" {
			what = o.err
		}
		w.violations = append(w.violations, fmt.Sprintf("%s at %s: %s", c, at.Format("15:04:05.000"), what))
	}
}

// finish stops the probes and returns how many ran, how many were not dropped, and the
// first of those.
func (w *deniedWatch) finish() (probes, bad int, violations []string) {
	close(w.stop)
	w.wg.Wait()
	return w.probes, w.bad, w.violations
}

// liveCluster is the cluster as the API has it now, for the model: the namespaces of the
// model and of the case, their pods and their policies.
func (m *modelCluster) liveCluster(t *testing.T) *policymodel.Cluster {
	t.Helper()
	c, err := m.readCluster()
	if err != nil {
		t.Fatalf("read the cluster for the model: %v", err)
	}
	return c
}
