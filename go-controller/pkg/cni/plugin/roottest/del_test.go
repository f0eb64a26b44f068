package roottest

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/cnitest"
)

func TestDelIsIdempotent(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	e.mustAdd(p)
	for i := 1; i <= 2; i++ {
		if _, err := e.run(del, e.args(p, nil)); err != nil {
			t.Fatalf("DEL #%d: %v", i, err)
		}
		assertOnlyLoopback(t, e.node)
		assertOnlyLoopback(t, p.netns)
	}
	if d := e.agent.Calls(cnitest.OpDetach); len(d) != 2 || d[0].Pod != p.ref {
		t.Errorf("detach calls = %+v, want two for %s", d, p.ref)
	}
}

func TestDelAfterNetnsDeleted(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, podConfig(1))
	e.mustAdd(p)
	if out, err := exec.Command("ip", "netns", "del", filepath.Base(p.netns)).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	if _, err := e.run(del, e.args(p, nil)); err != nil {
		t.Fatalf("DEL after the netns was deleted: %v", err)
	}
	assertOnlyLoopback(t, e.node)
}

func TestDelWithoutAdd(t *testing.T) {
	e := newEnv(t)
	p := e.newPod(1, nil)
	if _, err := e.run(del, e.args(p, nil)); err != nil {
		t.Fatalf("DEL of a sandbox never added: %v", err)
	}
}
