package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	log "github.com/sirupsen/logrus"
)

// testBuilder is a Builder over a fake Kubernetes build: specs of K8sBinary and
// K8sSource files build without go, mmdebstrap or the real cache.
func testBuilder(t *testing.T) *Builder {
	t.Helper()
	k8s, mod := t.TempDir(), t.TempDir()
	write := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(k8s, "bin", "pause"), "pause binary")
	write(filepath.Join(mod, "VERSION"), "1.2\n")
	logger := log.New()
	logger.SetOutput(io.Discard)
	return &Builder{Out: t.TempDir(), Cache: t.TempDir(), K8sDir: k8s, K8sModule: mod, Arch: runtime.GOARCH, Log: logger}
}

func scratchSpec() Spec {
	return Spec{
		Short: "tiny",
		Names: []string{"registry.example/tiny:1.2", "registry.example/tiny:1"},
		Files: []File{
			{Src: Source{Kind: K8sBinary, Name: "pause"}, Dest: "/pause", Mode: 0o755},
			{Src: Source{Kind: K8sSource, Name: "VERSION"}, Dest: "/etc/tiny/VERSION", Mode: 0o644},
		},
		Dirs:         []Dir{{Path: "/uploads", Mode: 0o755}},
		Symlinks:     []Symlink{{Path: "/pause-2", Target: "pause"}},
		User:         "65535:65535",
		Env:          []string{DefaultPath, "MODE=test"},
		Entrypoint:   []string{"/pause"},
		Cmd:          []string{"-v"},
		WorkDir:      "/uploads",
		ExposedPorts: []string{"8080/tcp"},
		Checks:       []Check{{Src: Source{Kind: K8sSource, Name: "VERSION"}, Want: "1.2", Why: "the tag"}},
	}
}

// untar unpacks an archive into a directory.
func untar(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			_ = os.MkdirAll(p, 0o755)
			continue
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildWritesAnOCIArchiveNamedForContainerd(t *testing.T) {
	b := testBuilder(t)
	results, err := b.Build(context.Background(), []Spec{scratchSpec()})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Archive != filepath.Join(b.Out, "tiny.tar") {
		t.Fatalf("results %+v", results)
	}
	dir := untar(t, results[0].Archive)
	for _, f := range []string{"oci-layout", "index.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("archive has no %s", f)
		}
	}
	// What `ctr images import` reads: one index entry per name, each carrying it.
	var index v1.IndexManifest
	raw, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 {
		t.Fatalf("index.json has %d entries, want one per name: %s", len(index.Manifests), raw)
	}
	for i, want := range scratchSpec().Names {
		m := index.Manifests[i]
		if m.Annotations[annotationContainerdName] != want || m.Annotations[annotationOCIRefName] != want {
			t.Errorf("index entry %d annotations %v, want both names %s", i, m.Annotations, want)
		}
		if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != runtime.GOARCH {
			t.Errorf("index entry %d: media type %s platform %+v", i, m.MediaType, m.Platform)
		}
		if m.Digest.String() != results[0].Digest {
			t.Errorf("index entry %d names %s, the build reported %s", i, m.Digest, results[0].Digest)
		}
	}
	checkImage(t, dir)
}

// checkImage reads the image back through go-containerregistry's layout reader.
func checkImage(t *testing.T, dir string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/pause" || strings.Join(c.Cmd, " ") != "-v" || c.User != "65535:65535" ||
		c.WorkingDir != "/uploads" || strings.Join(c.Env, " ") != DefaultPath+" MODE=test" || len(c.ExposedPorts) != 1 {
		t.Errorf("config %+v does not say what the spec says", c)
	}
	if !cf.Created.Time.Equal(epoch) || cf.OS != "linux" {
		t.Errorf("created %v os %s", cf.Created, cf.OS)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 (no base)", len(layers))
	}
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	got := readTar(t, rc)
	want := "etc/ etc/tiny/ etc/tiny/VERSION pause pause-2 uploads/"
	if strings.Join(names(got), " ") != want {
		t.Errorf("layer holds %v, want %s", names(got), want)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	b := testBuilder(t)
	first, err := b.Build(context.Background(), []Spec{scratchSpec()})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first[0].Archive)
	// Fresh source times and another output directory change nothing.
	_ = os.Chtimes(filepath.Join(b.K8sDir, "bin", "pause"), epoch.AddDate(30, 0, 0), epoch.AddDate(30, 0, 0))
	b.Out = t.TempDir()
	second, err := b.Build(context.Background(), []Spec{scratchSpec()})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(second[0].Archive)
	if first[0].Digest != second[0].Digest || !bytes.Equal(a, c) {
		t.Errorf("two builds of the same inputs differ: %s vs %s", first[0].Digest, second[0].Digest)
	}
	// And different content does change the digest.
	if err := os.WriteFile(filepath.Join(b.K8sDir, "bin", "pause"), []byte("another pause"), 0o755); err != nil {
		t.Fatal(err)
	}
	third, err := b.Build(context.Background(), []Spec{scratchSpec()})
	if err != nil {
		t.Fatal(err)
	}
	if third[0].Digest == first[0].Digest {
		t.Error("a changed file leaves the image digest unchanged")
	}
}

func TestBuildSaysWhatIsMissing(t *testing.T) {
	b := testBuilder(t)
	if err := os.Remove(filepath.Join(b.K8sDir, "bin", "pause")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Build(context.Background(), []Spec{scratchSpec()})
	if err == nil || !strings.Contains(err.Error(), "make k8s") {
		t.Errorf("missing Kubernetes build: %v, want it to name make k8s", err)
	}
	if _, err := os.Stat(filepath.Join(b.Out, "tiny.tar")); err == nil {
		t.Error("an archive was written although a source is missing")
	}
}

func TestBuildChecksVersions(t *testing.T) {
	b := testBuilder(t)
	s := scratchSpec()
	s.Checks[0].Want = "1.3"
	_, err := b.Build(context.Background(), []Spec{s})
	if err == nil || !strings.Contains(err.Error(), `k8s-src:VERSION says "1.2", but the spec expects "1.3" (the tag)`) {
		t.Errorf("a version check that fails: %v", err)
	}
}

func TestBuildNeedsMmdebstrapForABase(t *testing.T) {
	b := testBuilder(t)
	t.Setenv("PATH", t.TempDir())
	s := scratchSpec()
	s.Base = &Base{Suite: "bookworm", DockerImage: "debian:12-slim", Packages: []string{"iproute2"}}
	_, err := b.Build(context.Background(), []Spec{s})
	if err == nil || !strings.Contains(err.Error(), "mmdebstrap not found") || !strings.Contains(err.Error(), "apt-get install mmdebstrap") {
		t.Errorf("no mmdebstrap: %v", err)
	}
}
