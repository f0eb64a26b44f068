package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
)

const (
	// rootfsFormat names how a root filesystem is made and normalized; change it when
	// that changes, so every cached root filesystem is rebuilt.
	rootfsFormat = "kovs-rootfs-1"
	// rootfsSourceDateEpoch is mmdebstrap's SOURCE_DATE_EPOCH: it clamps the times of
	// what it writes, so a rebuild from the same mirror content gives the same files.
	rootfsSourceDateEpoch = "1700000000"
)

// slimPaths is what debian:slim leaves out, as dpkg path filters. mmdebstrap keeps them
// in /etc/dpkg/dpkg.cfg.d/99mmdebstrap, so packages installed later skip them too.
var slimPaths = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/groff/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/lintian/*",
	"path-exclude=/usr/share/linda/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
}

// aptOptions let a snapshot mirror (whose Release files have expired) serve the build, as
// this machine's apt is configured to; signatures are still checked.
var aptOptions = []string{
	`Acquire::Check-Valid-Until "false"`,
	`Acquire::Check-Date "false"`,
}

// mmdebstrapArgs are the options that make base's root filesystem, without the suite,
// output and mirrors. Apt lists and caches and the files that make a root filesystem
// unreproducible are removed by mmdebstrap itself (its default cleanup).
func mmdebstrapArgs(base *Base) []string {
	args := []string{"--variant=minbase", "--format=tar", "--include=" + strings.Join(base.Packages, ",")}
	for _, o := range aptOptions {
		args = append(args, "--aptopt="+o)
	}
	for _, p := range slimPaths {
		args = append(args, "--dpkgopt="+p)
	}
	// The runtime provides these; the builder's own would leak into the image.
	args = append(args, `--customize-hook=rm -f "$1/etc/resolv.conf" "$1/etc/hostname"`)
	for _, h := range accountHooks(base) {
		args = append(args, "--customize-hook="+h)
	}
	return args
}

// accountHooks add base's users and groups to the root filesystem's account files, the
// way adduser would (a user's own group, then the groups that list it).
func accountHooks(base *Base) []string {
	var hooks []string
	add := func(file, line string) {
		hooks = append(hooks, fmt.Sprintf(`echo '%s' >>"$1/etc/%s"`, line, file))
	}
	for _, u := range base.Users {
		if !hasGroup(base, u.GID) {
			add("group", fmt.Sprintf("%s:x:%d:", u.Name, u.GID))
			add("gshadow", fmt.Sprintf("%s:!::", u.Name))
		}
		add("passwd", fmt.Sprintf("%s:x:%d:%d::%s:%s", u.Name, u.UID, u.GID, u.Home, u.Shell))
		add("shadow", fmt.Sprintf("%s:!:::::::", u.Name))
		hooks = append(hooks, fmt.Sprintf(`mkdir -p "$1%s" && chown %d:%d "$1%s"`, u.Home, u.UID, u.GID, u.Home))
	}
	for _, g := range base.Groups {
		members := strings.Join(g.Members, ",")
		add("group", fmt.Sprintf("%s:x:%d:%s", g.Name, g.GID, members))
		add("gshadow", fmt.Sprintf("%s:!::%s", g.Name, members))
	}
	return hooks
}

func hasGroup(base *Base, gid int) bool {
	for _, g := range base.Groups {
		if g.GID == gid {
			return true
		}
	}
	return false
}

// rootfsKey hashes everything that decides a root filesystem's content: the format, the
// architecture, mmdebstrap's version, its options, the suite and the apt sources.
func rootfsKey(arch, mmdebstrapVersion string, base *Base, sources [][]byte) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s\n", len(s), s) }
	field(rootfsFormat)
	field(rootfsSourceDateEpoch)
	field(arch)
	field(mmdebstrapVersion)
	field(base.Suite)
	for _, a := range mmdebstrapArgs(base) {
		field(a)
	}
	for _, s := range sources {
		field(string(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultAptSources lists this machine's apt sources: /etc/apt/sources.list and the
// .list and .sources files of /etc/apt/sources.list.d, sorted.
func DefaultAptSources() []string {
	var out []string
	if st, err := os.Stat("/etc/apt/sources.list"); err == nil && st.Size() > 0 {
		out = append(out, "/etc/apt/sources.list")
	}
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join("/etc/apt/sources.list.d", pat))
		out = append(out, m...)
	}
	sort.Strings(out)
	return out
}

// rootfs returns the cached layer of base's root filesystem, building it first if the
// cache has none for its key.
func (b *Builder) rootfs(ctx context.Context, base *Base) (string, error) {
	mm, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return "", errors.New("mmdebstrap not found: it makes the Debian root filesystems (apt-get install mmdebstrap, or make deps)")
	}
	version, err := exec.CommandContext(ctx, mm, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("mmdebstrap --version: %w", err)
	}
	if len(b.AptSources) == 0 {
		return "", errors.New("no apt sources: this machine has none in /etc/apt/sources.list(.d); pass --apt-sources")
	}
	var sources [][]byte
	for _, s := range b.AptSources {
		c, err := os.ReadFile(s)
		if err != nil {
			return "", fmt.Errorf("apt sources: %w", err)
		}
		sources = append(sources, c)
	}
	key := rootfsKey(b.Arch, strings.TrimSpace(string(version)), base, sources)
	file := filepath.Join(b.Cache, fmt.Sprintf("rootfs-%s-%s.tar.gz", base.Suite, key[:16]))
	logger := b.Log.WithFields(log.Fields{"rootfs": filepath.Base(file), "packages": strings.Join(base.Packages, ",")})
	if _, err := os.Stat(file); err == nil {
		logger.Debug("root filesystem cached")
		return file, nil
	}
	logger.Info("building root filesystem with mmdebstrap (cached afterwards)")
	start := time.Now()
	if err := b.buildRootfs(ctx, mm, base, file); err != nil {
		return "", err
	}
	logger.WithField("took", time.Since(start).Round(time.Second)).Info("root filesystem built")
	return file, nil
}

func (b *Builder) buildRootfs(ctx context.Context, mm string, base *Base, file string) error {
	if err := os.MkdirAll(b.Cache, 0o755); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	tmp, err := os.MkdirTemp(b.Cache, ".rootfs-")
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	raw := filepath.Join(tmp, "rootfs.tar")
	args := append(mmdebstrapArgs(base), base.Suite, raw)
	args = append(args, b.AptSources...)
	cmd := exec.CommandContext(ctx, mm, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+rootfsSourceDateEpoch, "TMPDIR="+tmp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s %s failed: %w\n%s", base.Suite, strings.Join(base.Packages, ","), err, tail(out.String(), 40))
	}
	in, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer in.Close()
	part := filepath.Join(tmp, "rootfs.tar.gz")
	dst, err := os.Create(part)
	if err != nil {
		return err
	}
	if err := normalizeRootfs(in, dst); err != nil {
		dst.Close()
		return fmt.Errorf("root filesystem %s: %w", filepath.Base(file), err)
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Rename(part, file)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
