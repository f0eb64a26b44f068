package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseNetConf(t *testing.T) {
	conf, err := parseNetConf([]byte(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if conf.Socket != DefaultSocket || conf.LogFile != "" || conf.Name != "kovs" || conf.CNIVersion != "1.1.0" {
		t.Errorf("defaults: %+v", conf)
	}
	conf, err = parseNetConf([]byte(`{"cniVersion":"1.1.0","name":"kovs","type":"kovs-cni",` +
		`"socket":"/run/kovs-node-1/cni.sock","logFile":"/var/log/kovs/cni.log"}`))
	if err != nil {
		t.Fatal(err)
	}
	if conf.Socket != "/run/kovs-node-1/cni.sock" || conf.LogFile != "/var/log/kovs/cni.log" {
		t.Errorf("explicit fields: %+v", conf)
	}
}

func TestParseNetConfErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conf     string
		wantCode uint
		wantMsg  string
	}{
		{"not JSON", `{"name":`, types.ErrDecodingFailure, "parse the kovs network config"},
		{"wrong type", `{"name":"kovs","socket":5}`, types.ErrDecodingFailure, "socket"},
		{"relative socket", `{"name":"kovs","socket":"cni.sock"}`, types.ErrInvalidNetworkConfig, `socket "cni.sock" is not an absolute path`},
		{"relative log", `{"name":"kovs","logFile":"cni.log"}`, types.ErrInvalidNetworkConfig, `logFile "cni.log"`},
		{"portmap options not an object", `{"name":"kovs","portmap":"iptables"}`, types.ErrDecodingFailure, "portmap"},
		{"portmap option kovs-cni sets", `{"name":"kovs","portmap":{"backend":"iptables","type":"other"}}`, types.ErrInvalidNetworkConfig,
			`network config "kovs": portmap option "type" is kovs-cni's to set: remove it`},
		{"portMappings not a list", `{"name":"kovs","runtimeConfig":{"portMappings":{}}}`, types.ErrDecodingFailure, "portMappings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseNetConf([]byte(tc.conf))
			assertCNIError(t, err, tc.wantCode, tc.wantMsg)
		})
	}
}

func TestParsePod(t *testing.T) {
	pod, err := parsePod("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;"+
		"K8S_POD_INFRA_CONTAINER_ID=4f1c;K8S_POD_UID=0b8f", true)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "default" || pod.Name != "web" || pod.UID != "0b8f" {
		t.Errorf("pod = %+v", pod)
	}
	if pod, err := parsePod("", false); err != nil || !pod.IsZero() {
		t.Errorf("optional pod from empty CNI_ARGS = %+v, %v", pod, err)
	}
}

func TestParsePodErrors(t *testing.T) {
	for _, tc := range []struct{ name, args, wantMsg string }{
		{"empty", "", "CNI_ARGS lacks K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID"},
		{"no UID", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web", "CNI_ARGS lacks K8S_POD_UID"},
		{"unknown key without IgnoreUnknown", "K8S_POD_NAMESPACE=default;FOO=bar", "parse CNI_ARGS"},
		{"malformed", "K8S_POD_NAMESPACE", "parse CNI_ARGS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePod(tc.args, true)
			assertCNIError(t, err, types.ErrInvalidEnvironmentVariables, tc.wantMsg)
		})
	}
}

// assertCNIError checks that err, as the runtime gets it, has code and a message
// containing msg.
func assertCNIError(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var te *types.Error
	if !errors.As(cniError(err), &te) {
		t.Fatalf("error = %v, want a CNI error", err)
	}
	if te.Code != code || !strings.Contains(te.Msg, msg) {
		t.Errorf("CNI error = code %d %q, want code %d containing %q", te.Code, te.Msg, code, msg)
	}
}
