// Command kovs-images builds kovs's container images and the test images as OCI image
// archives without a container engine, lists them, and generates images/Dockerfile.*
// from the same specs (go-controller/pkg/images).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"

	log "github.com/sirupsen/logrus"

	"github.com/kovs-net/kovs/go-controller/pkg/images"
)

const usage = `usage: kovs-images COMMAND [flags]

commands:
  build [flags] [NAME...]      build the images (default: all) into --out as <NAME>.tar
  list                         the images, their names and what they hold
  dockerfiles [--check]        write images/Dockerfile.* from the specs; --check: fail if they differ

Import an archive into containerd:  ctr -n k8s.io images import _output/images/agnhost.tar
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = build(ctx, os.Args[2:])
	case "list":
		err = list()
	case "dockerfiles":
		err = dockerfiles(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kovs-images: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kovs-images: %v\n", err)
		os.Exit(1)
	}
}

func defaultCache() string {
	if c := os.Getenv("KOVS_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".cache/kovs"
	}
	return filepath.Join(home, ".cache", "kovs")
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kovs-images build", flag.ExitOnError)
	cache := defaultCache()
	out := fs.String("out", "_output/images", "directory the archives (<NAME>.tar) and the kovs binaries (bin/) go to")
	imageCache := fs.String("cache", filepath.Join(cache, "images"), "directory of the cached root filesystems")
	k8sDir := fs.String("k8s-dir", filepath.Join(cache, "k8s-v"+images.K8sVersion), "the cached Kubernetes build (bin/agnhost, bin/pause), made by make k8s")
	ovsDir := fs.String("ovs-dir", filepath.Join(cache, "ovs"), "the cached Open vSwitch build (bin/ovs-vswitchd), made by make ovs")
	k8sModule := fs.String("k8s-module", "", "the k8s.io/kubernetes@v"+images.K8sVersion+" module source (default: in the Go module cache)")
	repo := fs.String("repo", ".", "the kovs repository the kovs binaries are built from")
	aptSources := fs.String("apt-sources", strings.Join(images.DefaultAptSources(), ","), "apt source files mmdebstrap installs from, comma-separated")
	goCmd := fs.String("go", "go", "the go command")
	verbose := fs.Bool("v", false, "log debug messages")
	_ = fs.Parse(args)
	if *verbose {
		log.SetLevel(log.DebugLevel)
	}
	specs, err := images.Lookup(fs.Args()...)
	if err != nil {
		return err
	}
	var sources []string
	if *aptSources != "" {
		sources = strings.Split(*aptSources, ",")
	}
	b := &images.Builder{
		RepoRoot: *repo, Out: *out, Cache: *imageCache, K8sDir: *k8sDir, K8sModule: *k8sModule, OVSDir: *ovsDir,
		AptSources: sources, Go: *goCmd, Arch: runtime.GOARCH, Log: log.StandardLogger(),
	}
	results, err := b.Build(ctx, specs)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ARCHIVE\tSIZE\tDIGEST\tNAMES")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%.1f MiB\t%s\t%s\n", r.Archive, float64(r.Size)/(1<<20), r.Digest, strings.Join(r.Spec.Names, " "))
	}
	return w.Flush()
}

func list() error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tNAMES\tBASE\tABOUT")
	for _, s := range images.Catalog() {
		base := "none"
		if s.Base != nil {
			base = s.Base.Suite + ": " + strings.Join(s.Base.Packages, " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Short, strings.Join(s.Names, " "), base, s.About)
	}
	return w.Flush()
}

func dockerfiles(args []string) error {
	fs := flag.NewFlagSet("kovs-images dockerfiles", flag.ExitOnError)
	dir := fs.String("dir", "images", "directory of the Dockerfiles")
	check := fs.Bool("check", false, "write nothing; fail if the Dockerfiles differ from what the specs generate")
	_ = fs.Parse(args)
	if !*check {
		return images.WriteDockerfiles(*dir, images.Catalog())
	}
	problems, err := images.CheckDockerfiles(*dir, images.Catalog())
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s is out of date (run kovs-images dockerfiles):\n  %s", *dir, strings.Join(problems, "\n  "))
	}
	return nil
}
