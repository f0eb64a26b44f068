package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type tarEntry struct {
	name, linkname string
	typ            byte
	mode           int64
	uid, gid       int
	mtime          time.Time
	uname          string
	pax            map[string]string
	content        string
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, tarEntry{
			name: h.Name, linkname: h.Linkname, typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid,
			mtime: h.ModTime, uname: h.Uname, pax: h.PAXRecords, content: string(b),
		})
	}
}

func names(entries []tarEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.name)
	}
	return out
}

func TestWriteLayerIsSortedWithParentsAndFixedTimes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Make the source look fresh: its time must not reach the layer.
	_ = os.Chtimes(bin, time.Now(), time.Now())
	entries := []layerEntry{
		{Name: "usr/local/bin/kovs", Type: tar.TypeReg, Mode: 0o755, Source: bin},
		{Name: "agnhost-2", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "agnhost"},
		{Name: "uploads", Type: tar.TypeDir, Mode: 0o700, UID: 7, GID: 8},
		{Name: "opt/kovs/bin/kovs-cni", Type: tar.TypeReg, Mode: 0o755, Source: bin},
	}
	var a, b bytes.Buffer
	if err := writeLayer(&a, entries); err != nil {
		t.Fatal(err)
	}
	// Another order of the same entries gives the same bytes.
	reordered := []layerEntry{entries[3], entries[1], entries[0], entries[2]}
	if err := writeLayer(&b, reordered); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same entries in another order give another layer")
	}
	got := readTar(t, &a)
	want := []string{"agnhost-2", "opt/", "opt/kovs/", "opt/kovs/bin/", "opt/kovs/bin/kovs-cni", "uploads/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/kovs"}
	if strings.Join(names(got), " ") != strings.Join(want, " ") {
		t.Errorf("layer entries\n  %v\nwant\n  %v", names(got), want)
	}
	for _, e := range got {
		if !e.mtime.Equal(epoch) || e.uname != "" {
			t.Errorf("%s: mtime %v, owner name %q; want the epoch and none", e.name, e.mtime, e.uname)
		}
		switch e.name {
		case "usr/local/bin/kovs":
			if e.mode != 0o755 || e.content != "binary" || e.uid != 0 {
				t.Errorf("%s: mode %o uid %d content %q", e.name, e.mode, e.uid, e.content)
			}
		case "uploads/":
			if e.mode != 0o700 || e.uid != 7 || e.gid != 8 {
				t.Errorf("%s: mode %o owner %d:%d, want 700 7:8", e.name, e.mode, e.uid, e.gid)
			}
		case "usr/":
			if e.mode != 0o755 || e.typ != tar.TypeDir {
				t.Errorf("parent %s: type %c mode %o", e.name, e.typ, e.mode)
			}
		case "agnhost-2":
			if e.typ != tar.TypeSymlink || e.linkname != "agnhost" {
				t.Errorf("%s: type %c -> %q", e.name, e.typ, e.linkname)
			}
		}
	}
}

func TestWriteLayerRejectsNonRegularSource(t *testing.T) {
	err := writeLayer(io.Discard, []layerEntry{{Name: "x", Type: tar.TypeReg, Mode: 0o644, Source: t.TempDir()}})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as a file's source: %v", err)
	}
}

// A tar shaped like mmdebstrap's: device nodes first, then the tree with "./" names.
func mmdebstrapLikeTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	when := time.Unix(1700000000, 0)
	add := func(h *tar.Header, content string) {
		h.ModTime, h.AccessTime, h.ChangeTime = when, when, when
		h.Uname, h.Gname = "root", "root"
		h.Format = tar.FormatPAX
		h.Size = int64(len(content))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content))
	}
	add(&tar.Header{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}, "")
	add(&tar.Header{Name: "./dev/fd", Typeflag: tar.TypeSymlink, Linkname: "/proc/self/fd", Mode: 0o777}, "")
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "./bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin", Mode: 0o777}, "")
	add(&tar.Header{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "./usr/bin/ping", Typeflag: tar.TypeReg, Mode: 0o755,
		PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00", "LIBARCHIVE.creationtime": "1"}}, "ping")
	add(&tar.Header{Name: "./usr/bin/perl5", Typeflag: tar.TypeLink, Linkname: "./usr/bin/ping", Mode: 0o755}, "")
	add(&tar.Header{Name: "./etc/shadow", Typeflag: tar.TypeReg, Mode: 0o640, Gid: 42}, "root:*:19000:0:99999:7:::\n")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestNormalizeRootfs(t *testing.T) {
	var out bytes.Buffer
	if err := normalizeRootfs(bytes.NewReader(mmdebstrapLikeTar(t)), &out); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	_ = normalizeRootfs(bytes.NewReader(mmdebstrapLikeTar(t)), &again)
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("normalizing the same tar twice gives different bytes")
	}
	zr, err := gzip.NewReader(&out)
	if err != nil {
		t.Fatalf("the root filesystem layer is not gzip: %v", err)
	}
	got := readTar(t, zr)
	if want := "dev/ bin usr/bin/ping usr/bin/perl5 etc/shadow"; strings.Join(names(got), " ") != want {
		t.Errorf("entries %v, want %s (no device nodes, no root entry, no ./, dev/ once)", names(got), want)
	}
	for _, e := range got {
		if !e.mtime.Equal(epoch) || e.uname != "" {
			t.Errorf("%s: mtime %v owner name %q", e.name, e.mtime, e.uname)
		}
		switch e.name {
		case "usr/bin/ping":
			if e.pax["SCHILY.xattr.security.capability"] != "\x01\x00" {
				t.Errorf("ping lost its file capability xattr: %v", e.pax)
			}
			if _, ok := e.pax["LIBARCHIVE.creationtime"]; ok {
				t.Errorf("ping kept a non-xattr PAX record: %v", e.pax)
			}
			if e.content != "ping" {
				t.Errorf("ping content %q", e.content)
			}
		case "usr/bin/perl5":
			if e.typ != tar.TypeLink || e.linkname != "usr/bin/ping" {
				t.Errorf("hard link: type %c -> %q, want usr/bin/ping", e.typ, e.linkname)
			}
		case "etc/shadow":
			if e.mode != 0o640 || e.gid != 42 {
				t.Errorf("etc/shadow: mode %o gid %d", e.mode, e.gid)
			}
		}
	}
}
