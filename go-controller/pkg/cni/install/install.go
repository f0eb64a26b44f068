// Package install puts CNI plugin binaries into a node's CNI bin directory the way a
// running node needs it: a runtime may be executing the old binary at any moment (an ADD
// in flight), and writing over an executing file fails with "text file busy" (ETXTBSY),
// while a runtime must never execute a half-written one. So each binary is written to a
// temporary file in the same directory, synced, and renamed over the old name: the rename
// is atomic, the old inode lives on until its last execution ends.
package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Binaries installs each of srcs into dir under its base name, atomically. It stops at the
// first failure; what it already installed stays installed (each one is complete).
func Binaries(dir string, srcs ...string) error {
	if len(srcs) == 0 {
		return errors.New("install: no binaries given")
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("install into %s: %w (is the host's CNI bin directory mounted?)", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("install into %s: not a directory", dir)
	}
	for _, src := range srcs {
		if err := binary(dir, src); err != nil {
			return err
		}
	}
	return nil
}

func binary(dir, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install %s: %w", src, err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src))
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(src)+".*")
	if err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("install %s: copy: %w", dst, err)
	}
	if err = tmp.Chmod(0o755); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("install %s: sync: %w", dst, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return syncDir(dir)
}

// syncDir makes the rename durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
