package plugin

import (
	"path/filepath"
	"testing"
)

// The runtime's network config (stdin) and CNI_ARGS are kovs-cni's outside input: parsed
// or refused with a CNI error, never a panic, and what is accepted has the fields kovs-cni
// relies on.
func FuzzParseNetConf(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni","socket":"/var/run/kovs/cni.sock"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni","logFile":"relative.log"}`))
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := parseNetConf(stdin)
		if err != nil {
			return
		}
		if !filepath.IsAbs(conf.Socket) || (conf.LogFile != "" && !filepath.IsAbs(conf.LogFile)) {
			t.Fatalf("accepted socket %q, logFile %q", conf.Socket, conf.LogFile)
		}
	})
}

func FuzzParsePod(f *testing.F) {
	f.Add("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=a;K8S_POD_UID=u1", true)
	f.Add("K8S_POD_NAME=a", false)
	f.Fuzz(func(t *testing.T, args string, required bool) {
		pod, err := parsePod(args, required)
		if err == nil && required && (pod.Namespace == "" || pod.Name == "" || pod.UID == "") {
			t.Fatalf("%q: accepted %+v for ADD", args, pod)
		}
	})
}
