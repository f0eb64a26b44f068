package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A binary a runtime is executing (a CNI ADD in flight) is replaced, the running process
// is unaffected, and the next execution runs the new binary. Writing over the file in
// place, as `cp` does, fails here with "text file busy".
func TestReplacesABinaryThatIsRunning(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "plugin")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep(1)")
	}
	copyTo(t, sleep, src)
	if err := Binaries(dir, src); err != nil {
		t.Fatal(err)
	}
	running := exec.Command(filepath.Join(dir, "plugin"), "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = running.Process.Kill(); _ = running.Wait() }()

	// A new version: the same binary with a marker appended (still runnable).
	next, _ := os.ReadFile(sleep)
	next = append(next, []byte("kovs-next-version")...)
	if err := os.WriteFile(src, next, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Binaries(dir, src); err != nil {
		t.Fatalf("install while the old binary runs: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "plugin"))
	if !bytes.Equal(got, next) {
		t.Fatalf("installed binary is not the new version")
	}
	if st, _ := os.Stat(filepath.Join(dir, "plugin")); st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755", st.Mode().Perm())
	}
	if err := exec.Command(filepath.Join(dir, "plugin"), "0").Run(); err != nil {
		t.Fatalf("new binary does not run: %v", err)
	}
	if running.ProcessState != nil {
		t.Fatalf("the running old binary was disturbed: %v", running.ProcessState)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestMissingDirectorySaysWhatToFix(t *testing.T) {
	err := Binaries(filepath.Join(t.TempDir(), "nope"), "/bin/true")
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("CNI bin directory")) {
		t.Fatalf("got %v", err)
	}
}

func copyTo(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
