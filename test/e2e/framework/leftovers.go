package framework

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/kovs-net/kovs/go-controller/pkg/sandbox"
)

// Footprint is what a sandbox holds on the machine outside its namespaces: taken before Up
// and after Down, the two must agree.
type Footprint struct {
	RootLinks []string
}

// TakeFootprint records the root namespace's interfaces.
func TakeFootprint() Footprint {
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return Footprint{RootLinks: names}
}

// Leftovers lists everything of sandbox l still on the machine: network namespaces,
// processes, mounts, listening ports, root-namespace interfaces that were not there
// before, and the state directory.
func Leftovers(l sandbox.Layout, before Footprint, ports []int) []string {
	var left []string
	for _, ns := range l.NetNamespaces() {
		left = append(left, "network namespace "+ns)
	}
	for _, pid := range l.OwnedPIDs() {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("process %d %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	for _, m := range l.Mounts() {
		left = append(left, "mount "+m)
	}
	for _, p := range listeningPorts() {
		for _, want := range ports {
			if p == want {
				left = append(left, fmt.Sprintf("listening port %d", p))
			}
		}
	}
	had := map[string]bool{}
	for _, n := range before.RootLinks {
		had[n] = true
	}
	for _, n := range TakeFootprint().RootLinks {
		if !had[n] {
			left = append(left, "interface "+n)
		}
	}
	if l.Exists() {
		left = append(left, "state directory "+l.Dir())
	}
	return left
}

// listeningPorts returns the TCP ports in LISTEN state in the root namespace.
func listeningPorts() []int {
	var ports []int
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			_, portHex, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseInt(portHex, 16, 32); err == nil {
				ports = append(ports, int(p))
			}
		}
		file.Close()
	}
	return ports
}
