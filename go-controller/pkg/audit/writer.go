package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// CollapseWindow is how long denies of one flow are gathered into one line.
const CollapseWindow = time.Second

// FileConfig is where the log goes and how big it may grow.
type FileConfig struct {
	Path string
	// MaxSizeMB is the size at which the file is rotated; MaxBackups how many rotated
	// files are kept. The log takes at most (MaxBackups+1)*MaxSizeMB once lumberjack
	// has pruned the old backups, which it does in the background right after a rotation.
	MaxSizeMB  int
	MaxBackups int
}

// Writer writes records as JSON lines. Allows (and passes) are written at once; a deny is
// held for CollapseWindow, and the denies of the same flow by the same rule that come in
// that time add to its Count instead of writing lines of their own.
type Writer struct {
	mu      sync.Mutex
	out     io.Writer
	closer  io.Closer
	window  time.Duration
	pending map[flowKey]*Record
	lines   int
}

// NewWriter writes to out (tests; a file's writer comes from NewFileWriter).
func NewWriter(out io.Writer) *Writer {
	return &Writer{out: out, window: CollapseWindow, pending: map[flowKey]*Record{}}
}

// NewFileWriter writes to cfg.Path, rotated at cfg.MaxSizeMB with cfg.MaxBackups old
// files kept (lumberjack).
func NewFileWriter(cfg FileConfig) *Writer {
	l := &lumberjack.Logger{Filename: cfg.Path, MaxSize: cfg.MaxSizeMB, MaxBackups: cfg.MaxBackups}
	w := NewWriter(l)
	w.closer = l
	return w
}

// Write logs r (its Count is set here). r.Time is when the packet arrived.
func (w *Writer) Write(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.Verdict != Deny {
		r.Count = 1
		return w.emit(r)
	}
	k := r.key()
	if p, ok := w.pending[k]; ok && r.Time.Sub(p.Time) < w.window {
		p.Count++
		return nil
	}
	// A deny of the flow after its window: the held line goes first.
	if p, ok := w.pending[k]; ok {
		delete(w.pending, k)
		if err := w.emit(*p); err != nil {
			return err
		}
	}
	r.Count = 1
	w.pending[k] = &r
	return nil
}

// Flush writes the held denies whose window ended by now, oldest first.
func (w *Writer) Flush(now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked(func(r *Record) bool { return now.Sub(r.Time) >= w.window })
}

func (w *Writer) flushLocked(due func(*Record) bool) error {
	var out []Record
	for k, r := range w.pending {
		if due(r) {
			out = append(out, *r)
			delete(w.pending, k)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Time.Compare(b.Time) })
	for _, r := range out {
		if err := w.emit(r); err != nil {
			return err
		}
	}
	return nil
}

// Lines is how many lines the writer has written.
func (w *Writer) Lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines
}

func (w *Writer) emit(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	if _, err := w.out.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write audit log: %w", err)
	}
	w.lines++
	return nil
}

// Run flushes held denies every tick until ctx ends, then writes every held line and
// closes the file.
func (w *Writer) Run(ctx context.Context, tick time.Duration) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			if err := w.Flush(now); err != nil {
				return err
			}
		case <-ctx.Done():
			return w.Close()
		}
	}
}

// Close writes every held line and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked(func(*Record) bool { return true })
	if w.closer != nil {
		if cerr := w.closer.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
