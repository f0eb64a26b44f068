package plugin

import (
	"io"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/sirupsen/logrus"
)

// logger returns the command's logger and what closes it: Info and above to the config's
// logFile, or only warnings to stderr without one (a plugin's stdout is its result).
func (p *Plugin) logger(conf *NetConf, command string, args *skel.CmdArgs) (*logrus.Entry, func()) {
	l := logrus.New()
	l.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	l.SetOutput(p.stderr)
	l.SetLevel(logrus.WarnLevel)
	closeLog := func() {}
	if conf.LogFile != "" {
		f, err := openLogFile(conf.LogFile)
		if err != nil {
			l.WithError(err).Warn("cannot open the log file; logging warnings to stderr")
		} else {
			l.SetOutput(f)
			l.SetLevel(logrus.InfoLevel)
			closeLog = func() { _ = f.Close() }
		}
	}
	entry := l.WithFields(logrus.Fields{
		"command":   command,
		"container": shortID(args.ContainerID),
		"netns":     args.Netns,
		"ifname":    args.IfName,
	})
	return entry, closeLog
}

// openLogFile opens path for appending, creating it (and its directory) if needed.
func openLogFile(path string) (io.WriteCloser, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// shortID is the 12-character form runtimes print container IDs in.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
