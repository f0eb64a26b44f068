package ovsdaemon

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{
		DBFile: DefaultDBFile, Schema: DefaultSchema, RunDir: DefaultRunDir, SystemIDFile: DefaultSystemIDFile,
		LogLevel: "info", StartTimeout: time.Second, StopTimeout: time.Second,
	}
}

func TestDaemonArgsStayInTheForeground(t *testing.T) {
	c := testConfig()
	for name, args := range map[string][]string{"ovsdb-server": c.ovsdbServerArgs(), "ovs-vswitchd": c.ovsVswitchdArgs()} {
		for _, a := range args {
			if a == "--detach" || a == "--monitor" || strings.HasPrefix(a, "--log-file") {
				t.Errorf("%s gets %s: it must stay a foreground child logging to the container", name, a)
			}
		}
		if !slices.Contains(args, "--pidfile=/var/run/openvswitch/"+name+".pid") {
			t.Errorf("%s args %v: no pidfile in the run directory", name, args)
		}
	}
	if !slices.Contains(c.ovsdbServerArgs(), "--remote=punix:/var/run/openvswitch/db.sock") {
		t.Errorf("ovsdb-server args %v: not serving db.sock", c.ovsdbServerArgs())
	}
	if got := c.ovsVswitchdArgs(); got[0] != "unix:/var/run/openvswitch/db.sock" || !slices.Contains(got, "--unixctl=/var/run/openvswitch/ovs-vswitchd.ctl") {
		t.Errorf("ovs-vswitchd args %v: want the database socket first and the fixed unixctl socket", got)
	}
	c.VswitchdCtl, c.Mlockall = "/run/x.ctl", true
	if got := c.ovsVswitchdArgs(); !slices.Contains(got, "--unixctl=/run/x.ctl") || !slices.Contains(got, "--mlockall") {
		t.Errorf("ovs-vswitchd args %v: --vswitchd-ctl or --mlockall ignored", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Config){
		"relative db":     func(c *Config) { c.DBFile = "conf.db" },
		"no run dir":      func(c *Config) { c.RunDir = "" },
		"relative ctl":    func(c *Config) { c.VswitchdCtl = "x.ctl" },
		"bad log level":   func(c *Config) { c.LogLevel = "verbose" },
		"no stop timeout": func(c *Config) { c.StopTimeout = 0 },
	} {
		c := testConfig()
		change(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
