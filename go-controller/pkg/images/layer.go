package images

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// epoch is the time every entry of every layer carries, and every image's creation
// time: the same inputs give the same bytes, and so the same digests.
var epoch = time.Unix(0, 0).UTC()

// layerEntry is one entry of a layer made from a spec.
type layerEntry struct {
	Name     string // path in the image, without the leading '/'
	Type     byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode     int64
	UID, GID int
	Linkname string // symlink target
	Source   string // file on this machine holding a regular file's content
}

// specEntries lists what a spec's own layer holds, with sources resolved by resolve.
func specEntries(s Spec, resolve func(Source) (string, error)) ([]layerEntry, error) {
	var out []layerEntry
	for _, f := range s.Files {
		p, err := resolve(f.Src)
		if err != nil {
			return nil, fmt.Errorf("image %s: %s: %w", s.Short, f.Dest, err)
		}
		out = append(out, layerEntry{Name: f.Dest[1:], Type: tar.TypeReg, Mode: f.Mode, Source: p})
	}
	for _, d := range s.Dirs {
		out = append(out, layerEntry{Name: d.Path[1:], Type: tar.TypeDir, Mode: d.Mode, UID: d.UID, GID: d.GID})
	}
	for _, l := range s.Symlinks {
		out = append(out, layerEntry{Name: l.Path[1:], Type: tar.TypeSymlink, Mode: 0o777, Linkname: l.Target})
	}
	return out, nil
}

// writeLayer writes entries as an uncompressed layer tar: with the parent directories
// they lack (0755, root), sorted by name, every time the epoch, numeric owners only.
func writeLayer(w io.Writer, entries []layerEntry) error {
	all := withParents(entries)
	tw := tar.NewWriter(w)
	for _, e := range all {
		if err := writeEntry(tw, e); err != nil {
			return fmt.Errorf("layer entry %s: %w", e.Name, err)
		}
	}
	return tw.Close()
}

func withParents(entries []layerEntry) []layerEntry {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name] = true
	}
	all := append([]layerEntry(nil), entries...)
	for _, e := range entries {
		for dir := path.Dir(e.Name); dir != "." && !have[dir]; dir = path.Dir(dir) {
			have[dir] = true
			all = append(all, layerEntry{Name: dir, Type: tar.TypeDir, Mode: 0o755})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

func writeEntry(tw *tar.Writer, e layerEntry) error {
	hdr := &tar.Header{
		Typeflag: e.Type, Name: e.Name, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
		Linkname: e.Linkname, ModTime: epoch, Format: tar.FormatPAX,
	}
	if e.Type == tar.TypeDir {
		hdr.Name += "/"
	}
	if e.Type != tar.TypeReg {
		return tw.WriteHeader(hdr)
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", e.Source)
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("copy %s: %w", e.Source, err)
	}
	return nil
}

// normalizeRootfs copies the tar mmdebstrap wrote into a gzip-compressed layer: device
// nodes and everything else under dev/ dropped (the runtime provides /dev), the root
// entry and the "./" prefixes dropped, every time set to the epoch, owner names and
// access/change times removed, only xattrs kept of the PAX records. mmdebstrap already
// sorts entries by name.
func normalizeRootfs(r io.Reader, w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tr, tw := tar.NewReader(r), tar.NewWriter(zw)
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read root filesystem tar: %w", err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if name == "" || name == "/" || seen[name] || (strings.HasPrefix(name, "dev/") && name != "dev/") {
			continue
		}
		seen[name] = true
		out := normalizedHeader(hdr, name)
		if err := tw.WriteHeader(out); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func normalizedHeader(hdr *tar.Header, name string) *tar.Header {
	out := &tar.Header{
		Typeflag: hdr.Typeflag, Name: name, Linkname: hdr.Linkname, Size: hdr.Size,
		Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, ModTime: epoch,
		Devmajor: hdr.Devmajor, Devminor: hdr.Devminor, Format: tar.FormatPAX,
	}
	if hdr.Typeflag == tar.TypeLink {
		out.Linkname = strings.TrimPrefix(hdr.Linkname, "./")
	}
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	return out
}
