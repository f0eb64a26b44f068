package ovs

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// logrusSink adapts logrus to the logr interface libovsdb logs through.
// libovsdb logs connection events at V(3) and transactions at V(4) and above:
// V(0..3) become logrus Debug, higher levels Trace. Errors become Warn, since
// libovsdb handles them itself (by reconnecting) before kovs sees anything.
type logrusSink struct {
	entry *logrus.Entry
}

func newLogrLogger(entry *logrus.Entry) logr.Logger {
	return logr.New(&logrusSink{entry: entry})
}

func (s *logrusSink) Init(logr.RuntimeInfo) {}

func (s *logrusSink) Enabled(level int) bool {
	return s.entry.Logger.IsLevelEnabled(logrusLevel(level))
}

func (s *logrusSink) Info(level int, msg string, kv ...any) {
	s.withValues(kv).Log(logrusLevel(level), msg)
}

func (s *logrusSink) Error(err error, msg string, kv ...any) {
	s.withValues(kv).WithError(err).Warn(msg)
}

func (s *logrusSink) WithValues(kv ...any) logr.LogSink {
	return &logrusSink{entry: s.withValues(kv)}
}

func (s *logrusSink) WithName(name string) logr.LogSink {
	return &logrusSink{entry: s.entry.WithField("logger", name)}
}

func (s *logrusSink) withValues(kv []any) *logrus.Entry {
	fields := logrus.Fields{}
	for i := 0; i+1 < len(kv); i += 2 {
		fields[fmt.Sprint(kv[i])] = kv[i+1]
	}
	return s.entry.WithFields(fields)
}

func logrusLevel(v int) logrus.Level {
	if v <= 3 {
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}
