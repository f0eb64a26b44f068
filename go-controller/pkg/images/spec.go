// Package images declares kovs's container images, and the test images the real-node
// sandbox and the upstream e2e suites need, as data (Spec), and builds them without a
// container engine: a Debian root filesystem made by mmdebstrap and cached, the image's
// files as a second layer, assembled with go-containerregistry into an OCI image archive
// whose index names the image under every one of its names, so `ctr -n k8s.io images
// import FILE` loads it with no flags. The Dockerfiles in images/ are generated from the
// same specs (Dockerfile), for users who build with Docker.
package images

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Spec is one image: what goes into it and what its config says.
type Spec struct {
	// Short names the image on the command line and its archive (<Short>.tar).
	Short string
	// Names are the full references (registry/repository:tag) the archive carries; an
	// import registers the image under each.
	Names []string
	// About says what the image is for, in a line (kovs-images list, Dockerfile header).
	About string
	// Base is the Debian root filesystem; nil for none (the image holds only Files).
	Base *Base
	// Files are added in a layer of their own, over Base.
	Files []File
	// Dirs and Symlinks are added in the same layer as Files.
	Dirs     []Dir
	Symlinks []Symlink

	Entrypoint   []string
	Cmd          []string
	Env          []string // KEY=VALUE
	User         string   // uid:gid, or a name Base defines
	WorkDir      string
	ExposedPorts []string // "80/tcp"

	// Dockerfile is the file under images/ generated from this spec; empty for none.
	Dockerfile string
	// Checks are facts of the sources the build verifies before it builds, so a name
	// that encodes a version cannot silently drift from what is built.
	Checks []Check
}

// Base is a Debian root filesystem: the minbase variant of Suite plus Packages (without
// their Recommends), trimmed like debian:slim.
type Base struct {
	Suite string
	// DockerImage is the image a Dockerfile starts from for the same base.
	DockerImage string
	// Packages are installed on top of minbase; sorted, no duplicates.
	Packages []string
	Groups   []Group
	Users    []User
}

// Group is a group the root filesystem defines.
type Group struct {
	Name    string
	GID     int
	Members []string
}

// User is a user the root filesystem defines, with a group of its own name and GID
// (as `adduser` makes it) unless GID names another of Base.Groups.
type User struct {
	Name  string
	UID   int
	GID   int
	Home  string
	Shell string
}

// SourceKind says where a file's content comes from.
type SourceKind string

const (
	// KovsBinary is a command of this repository, built by the builder from
	// ./go-controller/cmd/<Name> with GoBuild's settings, or, when Name is a package
	// path, that command of a module go.mod requires (a reference CNI plugin), built the
	// same way.
	KovsBinary SourceKind = "kovs"
	// K8sBinary is a binary of the cached Kubernetes build (<k8s dir>/bin/<Name>),
	// made by hack/build-k8s.sh (`make k8s`).
	K8sBinary SourceKind = "k8s-bin"
	// K8sSource is a file of the k8s.io/kubernetes module source (<module>/<Name>).
	K8sSource SourceKind = "k8s-src"
	// OVSBinary is a binary of the cached Open vSwitch build (<ovs dir>/bin/<Name>): Debian's
	// source with the patches in hack/ovs, made by hack/build-ovs.sh (`make ovs`).
	OVSBinary SourceKind = "ovs-bin"
)

// Source is where a file comes from.
type Source struct {
	Kind SourceKind
	Name string
}

func (s Source) String() string { return string(s.Kind) + ":" + s.Name }

// goPackage is the package a KovsBinary is built from.
func (s Source) goPackage() string {
	if strings.Contains(s.Name, "/") {
		return s.Name
	}
	return "./go-controller/cmd/" + s.Name
}

// binaryName is the file name a KovsBinary is built to (go build -o dir/).
func (s Source) binaryName() string { return path.Base(s.Name) }

// File is a regular file of the image.
type File struct {
	Src  Source
	Dest string // absolute path in the image
	Mode int64  // permission bits
}

// Dir is a directory of the image.
type Dir struct {
	Path     string
	Mode     int64
	UID, GID int
}

// Symlink is a symbolic link of the image.
type Symlink struct {
	Path, Target string
}

// Check is a file of the sources whose content (trimmed) must equal Want.
type Check struct {
	Src  Source
	Want string
	Why  string
}

// How kovs binaries are built, by the builder and in the Dockerfiles alike: static (the
// controller's image has no libc; kovs-cni runs on the host) and reproducible.
const (
	goBuildEnv     = "CGO_ENABLED=0"
	goBuildLDFlags = "-s -w"
)

// DefaultPath is the PATH of every image (the one debian images and BuildKit set).
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var (
	shortRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	accountRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]*$`)
	portRE    = regexp.MustCompile(`^[0-9]{1,5}/(tcp|udp|sctp)$`)
)

// Validate checks a spec for what would make a broken or ambiguous image.
func (s Spec) Validate() error {
	if !shortRE.MatchString(s.Short) {
		return fmt.Errorf("image short name %q: want lower-case letters, digits and '-'", s.Short)
	}
	if len(s.Names) == 0 {
		return fmt.Errorf("image %s: no names", s.Short)
	}
	for _, n := range s.Names {
		if _, err := name.NewTag(n, name.StrictValidation); err != nil {
			return fmt.Errorf("image %s: name %q is not a full registry/repository:tag reference: %w", s.Short, n, err)
		}
	}
	if d := firstDuplicate(s.Names); d != "" {
		return fmt.Errorf("image %s: name %s given twice", s.Short, d)
	}
	if len(s.Entrypoint) == 0 && len(s.Cmd) == 0 {
		return fmt.Errorf("image %s: no entrypoint and no cmd", s.Short)
	}
	if err := s.validatePaths(); err != nil {
		return err
	}
	if s.Base != nil {
		if err := s.Base.validate(); err != nil {
			return fmt.Errorf("image %s: %w", s.Short, err)
		}
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("image %s: env %q is not KEY=VALUE", s.Short, e)
		}
	}
	for _, p := range s.ExposedPorts {
		if !portRE.MatchString(p) {
			return fmt.Errorf("image %s: exposed port %q: want PORT/tcp, /udp or /sctp", s.Short, p)
		}
	}
	return nil
}

// validatePaths checks that every path the layer adds is absolute, clean and added once.
func (s Spec) validatePaths() error {
	var paths []string
	check := func(p, what string) error {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("image %s: %s path %q must be absolute and clean", s.Short, what, p)
		}
		paths = append(paths, p)
		return nil
	}
	for _, f := range s.Files {
		if err := check(f.Dest, "file"); err != nil {
			return err
		}
		if f.Mode <= 0 || f.Mode > 0o7777 {
			return fmt.Errorf("image %s: file %s: mode %o is not a permission mode", s.Short, f.Dest, f.Mode)
		}
		switch f.Src.Kind {
		case KovsBinary, K8sBinary, K8sSource, OVSBinary:
		default:
			return fmt.Errorf("image %s: file %s: unknown source kind %q", s.Short, f.Dest, f.Src.Kind)
		}
		if f.Src.Name == "" || strings.Contains(f.Src.Name, "..") {
			return fmt.Errorf("image %s: file %s: source %q must name a file inside its kind", s.Short, f.Dest, f.Src)
		}
	}
	for _, d := range s.Dirs {
		if err := check(d.Path, "directory"); err != nil {
			return err
		}
	}
	for _, l := range s.Symlinks {
		if err := check(l.Path, "symlink"); err != nil {
			return err
		}
		if l.Target == "" {
			return fmt.Errorf("image %s: symlink %s has no target", s.Short, l.Path)
		}
	}
	if d := firstDuplicate(paths); d != "" {
		return fmt.Errorf("image %s: %s is added twice", s.Short, d)
	}
	return nil
}

func (b *Base) validate() error {
	if b.Suite == "" || b.DockerImage == "" {
		return fmt.Errorf("base: needs a Debian suite and the matching Docker image")
	}
	if len(b.Packages) == 0 {
		return fmt.Errorf("base: no packages (use no base for an image of files only)")
	}
	for _, p := range b.Packages {
		if !packageRE.MatchString(p) {
			return fmt.Errorf("base: %q is not a Debian package name", p)
		}
	}
	if !slices.IsSorted(b.Packages) || firstDuplicate(b.Packages) != "" {
		return fmt.Errorf("base: packages %v must be sorted, each once", b.Packages)
	}
	var names []string
	for _, g := range b.Groups {
		if !accountRE.MatchString(g.Name) || g.GID <= 0 {
			return fmt.Errorf("base: group %q (gid %d) needs a name and a gid > 0", g.Name, g.GID)
		}
		names = append(names, "group "+g.Name)
	}
	for _, u := range b.Users {
		if !accountRE.MatchString(u.Name) || u.UID <= 0 || u.GID <= 0 || !path.IsAbs(u.Home) || !path.IsAbs(u.Shell) {
			return fmt.Errorf("base: user %q needs a name, uid and gid > 0, and absolute home and shell", u.Name)
		}
		names = append(names, "user "+u.Name)
	}
	if d := firstDuplicate(names); d != "" {
		return fmt.Errorf("base: %s defined twice", d)
	}
	return nil
}

func firstDuplicate(list []string) string {
	seen := map[string]bool{}
	for _, s := range list {
		if seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}
