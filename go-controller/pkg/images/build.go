package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
)

// Builder builds images from specs. Its paths are set by the caller (kovs-images);
// Build checks them and says what to run when something is missing.
type Builder struct {
	// RepoRoot is this repository (go.mod at its top): kovs binaries are built from it.
	RepoRoot string
	// Out receives <short>.tar per image, and bin/ the kovs binaries built for them.
	Out string
	// Cache holds the root filesystems ($KOVS_CACHE/images).
	Cache string
	// K8sDir is the cached Kubernetes build ($KOVS_CACHE/k8s-v<K8sVersion>), with bin/.
	K8sDir string
	// K8sModule is the k8s.io/kubernetes module's source; empty: found with `go env
	// GOMODCACHE`.
	K8sModule string
	// OVSDir is the cached Open vSwitch build ($KOVS_CACHE/ovs), with bin/.
	OVSDir string
	// AptSources are the apt source files mmdebstrap installs from.
	AptSources []string
	// Go is the go command.
	Go string
	// Arch is the images' architecture (GOARCH naming, which Debian shares for amd64 and
	// arm64); mmdebstrap builds for the machine's own.
	Arch string
	Log  log.FieldLogger
}

// Result is one image written.
type Result struct {
	Spec    Spec
	Archive string
	Size    int64
	Digest  string // the manifest's
}

// Build builds every spec into Out/<short>.tar.
func (b *Builder) Build(ctx context.Context, specs []Spec) ([]Result, error) {
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
	}
	if err := b.preflight(specs); err != nil {
		return nil, err
	}
	if err := b.buildKovsBinaries(ctx, specs); err != nil {
		return nil, err
	}
	var results []Result
	for _, s := range specs {
		start := time.Now()
		r, err := b.buildImage(ctx, s)
		if err != nil {
			return results, err
		}
		b.Log.WithFields(log.Fields{
			"image": s.Short, "archive": r.Archive, "size": r.Size, "digest": r.Digest,
			"names": strings.Join(s.Names, ","), "took": time.Since(start).Round(time.Millisecond),
		}).Info("image built")
		results = append(results, r)
	}
	return results, nil
}

// preflight checks, before anything is built, that every source exists and every check
// holds, so a missing Kubernetes build fails in a second with the make target to run.
func (b *Builder) preflight(specs []Spec) error {
	var errs []error
	for _, s := range specs {
		for _, f := range s.Files {
			if f.Src.Kind == KovsBinary {
				continue // built next
			}
			if _, err := b.resolve(f.Src); err != nil {
				errs = append(errs, fmt.Errorf("image %s: %w", s.Short, err))
			}
		}
		for _, c := range s.Checks {
			if err := b.check(c); err != nil {
				errs = append(errs, fmt.Errorf("image %s: %w", s.Short, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (b *Builder) check(c Check) error {
	p, err := b.resolve(c.Src)
	if err != nil {
		return err
	}
	got, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(got)) != c.Want {
		return fmt.Errorf("%s says %q, but the spec expects %q (%s): update the spec", c.Src, strings.TrimSpace(string(got)), c.Want, c.Why)
	}
	return nil
}

// resolve returns the file on this machine that holds a source's content.
func (b *Builder) resolve(src Source) (string, error) {
	var p string
	switch src.Kind {
	case KovsBinary:
		p = filepath.Join(b.Out, "bin", src.binaryName())
	case K8sBinary:
		p = filepath.Join(b.K8sDir, "bin", src.Name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %s is missing: build the Kubernetes binaries and test-image binaries first (make k8s)", src, p)
		}
	case OVSBinary:
		p = filepath.Join(b.OVSDir, "bin", src.Name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %s is missing: build Open vSwitch with kovs's patches first (make ovs)", src, p)
		}
	case K8sSource:
		mod, err := b.k8sModule()
		if err != nil {
			return "", err
		}
		p = filepath.Join(mod, filepath.FromSlash(src.Name))
	default:
		return "", fmt.Errorf("unknown source kind %q", src.Kind)
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", src, p)
	}
	return p, nil
}

// k8sModule finds the k8s.io/kubernetes module source in the Go module cache, where
// hack/build-k8s.sh downloads it.
func (b *Builder) k8sModule() (string, error) {
	if b.K8sModule != "" {
		return b.K8sModule, nil
	}
	out, err := exec.Command(b.Go, "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@v"+K8sVersion)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("the k8s.io/kubernetes@v%s module source is not in the Go module cache (%s): run make k8s", K8sVersion, dir)
	}
	b.K8sModule = dir
	return dir, nil
}

// buildKovsBinaries builds, in one go build, every kovs command the specs need into
// Out/bin, static and reproducible like the Dockerfiles' build stage.
func (b *Builder) buildKovsBinaries(ctx context.Context, specs []Spec) error {
	var pkgs []string
	seen := map[string]bool{}
	for _, s := range specs {
		for _, f := range s.Files {
			if f.Src.Kind == KovsBinary && !seen[f.Src.Name] {
				seen[f.Src.Name] = true
				pkgs = append(pkgs, f.Src.goPackage())
			}
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(b.RepoRoot, "go.mod")); err != nil {
		return fmt.Errorf("kovs sources: %s has no go.mod (run kovs-images from the repository root, or pass --repo)", b.RepoRoot)
	}
	bin := filepath.Join(b.Out, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-trimpath", "-ldflags=" + goBuildLDFlags, "-o", bin + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, b.Go, args...)
	cmd.Dir = b.RepoRoot
	cmd.Env = append(os.Environ(), goBuildEnv)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", b.Go, strings.Join(args, " "), err, out.String())
	}
	b.Log.WithFields(log.Fields{"binaries": len(pkgs), "dir": bin, "took": time.Since(start).Round(time.Millisecond)}).Info("kovs binaries built")
	return nil
}
