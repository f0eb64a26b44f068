package images

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The index annotations an import names an image by: containerd reads the first
// (`ctr images import` registers every index entry under it), the OCI spec defines the
// second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

// buildImage assembles one spec's image and writes its OCI image archive.
func (b *Builder) buildImage(ctx context.Context, s Spec) (Result, error) {
	if err := os.MkdirAll(b.Out, 0o755); err != nil {
		return Result{}, err
	}
	work, err := os.MkdirTemp(b.Out, "."+s.Short+"-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)

	var addenda []mutate.Addendum
	if s.Base != nil {
		file, err := b.rootfs(ctx, s.Base)
		if err != nil {
			return Result{}, fmt.Errorf("image %s: %w", s.Short, err)
		}
		layer, err := tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return Result{}, fmt.Errorf("image %s: root filesystem layer: %w", s.Short, err)
		}
		addenda = append(addenda, addendum(layer, "mmdebstrap --variant=minbase "+s.Base.Suite+" +"+strings.Join(s.Base.Packages, ",")))
	}
	files, err := b.filesLayer(s, filepath.Join(work, "files.tar.gz"))
	if err != nil {
		return Result{}, err
	}
	addenda = append(addenda, addendum(files, "kovs-images: "+s.Short+" files"))

	img, err := assemble(s, b.Arch, addenda)
	if err != nil {
		return Result{}, fmt.Errorf("image %s: %w", s.Short, err)
	}
	archive := filepath.Join(b.Out, s.Short+".tar")
	if err := writeArchive(img, s.Names, b.Arch, filepath.Join(work, "oci"), archive); err != nil {
		return Result{}, fmt.Errorf("image %s: %w", s.Short, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	st, err := os.Stat(archive)
	if err != nil {
		return Result{}, err
	}
	return Result{Spec: s, Archive: archive, Size: st.Size(), Digest: digest.String()}, nil
}

func addendum(l v1.Layer, createdBy string) mutate.Addendum {
	return mutate.Addendum{Layer: l, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy}}
}

// filesLayer writes the spec's own files as a compressed layer at file.
func (b *Builder) filesLayer(s Spec, file string) (v1.Layer, error) {
	entries, err := specEntries(s, b.resolve)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := writeLayer(zw, entries); err != nil {
		f.Close()
		return nil, fmt.Errorf("image %s: %w", s.Short, err)
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
}

// assemble makes the image: an OCI manifest and config with the spec's settings over
// the given layers, created at the epoch.
func assemble(s Spec, arch string, addenda []mutate.Addendum) (v1.Image, error) {
	cfg := v1.Config{
		Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, User: s.User, WorkingDir: s.WorkDir,
	}
	if len(s.ExposedPorts) > 0 {
		cfg.ExposedPorts = map[string]struct{}{}
		for _, p := range s.ExposedPorts {
			cfg.ExposedPorts[p] = struct{}{}
		}
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: arch, OS: "linux", Created: v1.Time{Time: epoch}, Config: cfg,
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, addenda...)
}

// writeArchive writes img as an OCI image layout (in dir, a scratch directory) with one
// index entry per name, then packs the layout into a tar at archive.
func writeArchive(img v1.Image, names []string, arch, dir, archive string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	for _, n := range names {
		err := p.AppendImage(img,
			layout.WithAnnotations(map[string]string{annotationContainerdName: n, annotationOCIRefName: n}),
			layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
		if err != nil {
			return fmt.Errorf("oci layout: %s: %w", n, err)
		}
	}
	return packDir(dir, archive)
}

// packDir writes the files under dir into a tar at archive, sorted, with the epoch as
// every time and root as every owner, through a temporary file renamed into place.
func packDir(dir, archive string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tmp := archive + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		e := layerEntry{Name: filepath.ToSlash(rel), Type: tar.TypeReg, Mode: 0o644, Source: p}
		if st, err := os.Stat(p); err != nil {
			f.Close()
			return err
		} else if st.IsDir() {
			e.Type, e.Mode, e.Source = tar.TypeDir, 0o755, ""
		}
		if err := writeEntry(tw, e); err != nil {
			f.Close()
			return fmt.Errorf("archive %s: %w", archive, err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, archive)
}
