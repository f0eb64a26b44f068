package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Kube-proxy's defaults for the host conntrack's TCP timeouts (its
// --conntrack-tcp-timeout-established and --conntrack-tcp-timeout-close-wait), which the
// agent sets in kube-proxy's place with --service-proxy=kovs.
const (
	DefaultConntrackTCPEstablished = 24 * time.Hour
	DefaultConntrackTCPCloseWait   = time.Hour
)

// conntrackTimeoutSysctls are the sysctls (keys under /proc/sys) that set the node's TCP
// conntrack timeouts, as kube-proxy writes them: a zero duration leaves its sysctl as it
// is.
func conntrackTimeoutSysctls(established, closeWait time.Duration) map[string]string {
	out := map[string]string{}
	if established > 0 {
		out["net/netfilter/nf_conntrack_tcp_timeout_established"] = strconv.Itoa(int(established / time.Second))
	}
	if closeWait > 0 {
		out["net/netfilter/nf_conntrack_tcp_timeout_close_wait"] = strconv.Itoa(int(closeWait / time.Second))
	}
	return out
}

// writeSysctls writes settings (keys under root, /proc/sys on a node) and says which
// failed.
func writeSysctls(root string, settings map[string]string) error {
	var errs []error
	for key, value := range settings {
		if err := os.WriteFile(filepath.Join(root, key), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", key, value, err))
		}
	}
	return errors.Join(errs...)
}
