package images

import (
	"strings"
	"testing"
)

func TestCatalogIsValid(t *testing.T) {
	shorts, names := map[string]bool{}, map[string]string{}
	for _, s := range Catalog() {
		if err := s.Validate(); err != nil {
			t.Errorf("%v", err)
		}
		if shorts[s.Short] {
			t.Errorf("short name %s used twice", s.Short)
		}
		shorts[s.Short] = true
		for _, n := range s.Names {
			if other, ok := names[n]; ok {
				t.Errorf("name %s is given by %s and %s", n, other, s.Short)
			}
			names[n] = s.Short
		}
	}
	for _, want := range []string{
		"docker.io/kovs/controller:latest", "docker.io/kovs/agent:latest", "docker.io/kovs/ovs:latest",
		"registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10",
		"registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/e2e-test-images/agnhost:2.45",
	} {
		if _, ok := names[want]; !ok {
			t.Errorf("no image is named %s", want)
		}
	}
}

// The catalog hands out copies: changing one spec's names must not change the next.
func TestCatalogReturnsFreshSpecs(t *testing.T) {
	a, _ := Lookup("pause")
	a[0].Names[0] = "changed"
	b, _ := Lookup("pause")
	if b[0].Names[0] == "changed" {
		t.Error("Catalog shares its name slices between calls")
	}
}

func TestLookup(t *testing.T) {
	got, err := Lookup("agnhost", "controller")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Short != "controller" || got[1].Short != "agnhost" {
		t.Errorf("Lookup(agnhost, controller) = %v, want both in catalog order", shorts(got))
	}
	all, _ := Lookup()
	if len(all) != len(Catalog()) {
		t.Errorf("Lookup() gives %d images, want all %d", len(all), len(Catalog()))
	}
	_, err = Lookup("agent", "nginx")
	if err == nil || !strings.Contains(err.Error(), "unknown image nginx") || !strings.Contains(err.Error(), "known: controller, agent") {
		t.Errorf("Lookup of an unknown image: %v", err)
	}
}

func shorts(specs []Spec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Short)
	}
	return out
}

func TestValidateRejects(t *testing.T) {
	good := func() Spec {
		return Spec{
			Short: "x", Names: []string{"registry.example/x:1"}, Entrypoint: []string{"/x"},
			Files: []File{{Src: Source{Kind: K8sBinary, Name: "x"}, Dest: "/x", Mode: 0o755}},
			Base:  &Base{Suite: "bookworm", DockerImage: "debian:12-slim", Packages: []string{"a-pkg", "b-pkg"}},
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("the good spec: %v", err)
	}
	cases := []struct {
		name   string
		change func(*Spec)
		want   string
	}{
		{"short name", func(s *Spec) { s.Short = "X Y" }, "short name"},
		{"no names", func(s *Spec) { s.Names = nil }, "no names"},
		{"name without registry", func(s *Spec) { s.Names = []string{"kovs/agent:latest"} }, "full registry/repository:tag"},
		{"name without tag", func(s *Spec) { s.Names = []string{"docker.io/kovs/agent"} }, "full registry/repository:tag"},
		{"name twice", func(s *Spec) { s.Names = append(s.Names, s.Names[0]) }, "given twice"},
		{"no entrypoint", func(s *Spec) { s.Entrypoint, s.Cmd = nil, nil }, "no entrypoint and no cmd"},
		{"relative dest", func(s *Spec) { s.Files[0].Dest = "usr/bin/x" }, "absolute and clean"},
		{"unclean dest", func(s *Spec) { s.Files[0].Dest = "/usr/../x" }, "absolute and clean"},
		{"no mode", func(s *Spec) { s.Files[0].Mode = 0 }, "permission mode"},
		{"unknown source", func(s *Spec) { s.Files[0].Src.Kind = "http" }, "unknown source kind"},
		{"source escapes", func(s *Spec) { s.Files[0].Src.Name = "../etc/passwd" }, "inside its kind"},
		{"path twice", func(s *Spec) { s.Dirs = []Dir{{Path: "/x", Mode: 0o755}} }, "added twice"},
		{"symlink without target", func(s *Spec) { s.Symlinks = []Symlink{{Path: "/y"}} }, "no target"},
		{"unsorted packages", func(s *Spec) { s.Base.Packages = []string{"bb", "aa"} }, "sorted"},
		{"package twice", func(s *Spec) { s.Base.Packages = []string{"aa", "aa"} }, "sorted, each once"},
		{"bad package", func(s *Spec) { s.Base.Packages = []string{"a;rm"} }, "not a Debian package"},
		{"empty base", func(s *Spec) { s.Base.Packages = nil }, "no packages"},
		{"bad user", func(s *Spec) { s.Base.Users = []User{{Name: "u", UID: 0, GID: 1, Home: "/h", Shell: "/bin/sh"}} }, "uid and gid > 0"},
		{"bad env", func(s *Spec) { s.Env = []string{"NOEQUALS"} }, "KEY=VALUE"},
		{"bad port", func(s *Spec) { s.ExposedPorts = []string{"80"} }, "PORT/tcp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := good()
			c.change(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func TestRootfsKeyCoversItsInputs(t *testing.T) {
	base := func() *Base {
		return &Base{Suite: "bookworm", DockerImage: "debian:12-slim", Packages: []string{"iproute2"}}
	}
	src := [][]byte{[]byte("deb http://mirror/debian bookworm main\n")}
	ref := rootfsKey("amd64", "mmdebstrap 1.3.5", base(), src)
	if again := rootfsKey("amd64", "mmdebstrap 1.3.5", base(), src); again != ref {
		t.Fatal("the same inputs give different keys")
	}
	withUser := base()
	withUser.Users = []User{{Name: "u", UID: 1000, GID: 1000, Home: "/home/u", Shell: "/bin/sh"}}
	other := map[string]string{
		"arch":       rootfsKey("arm64", "mmdebstrap 1.3.5", base(), src),
		"mmdebstrap": rootfsKey("amd64", "mmdebstrap 1.4.0", base(), src),
		"packages":   rootfsKey("amd64", "mmdebstrap 1.3.5", &Base{Suite: "bookworm", Packages: []string{"iproute2", "jq"}}, src),
		"suite":      rootfsKey("amd64", "mmdebstrap 1.3.5", &Base{Suite: "trixie", Packages: []string{"iproute2"}}, src),
		"sources":    rootfsKey("amd64", "mmdebstrap 1.3.5", base(), [][]byte{[]byte("deb http://other/debian bookworm main\n")}),
		"users":      rootfsKey("amd64", "mmdebstrap 1.3.5", withUser, src),
	}
	for what, k := range other {
		if k == ref {
			t.Errorf("changing the %s does not change the root filesystem's key", what)
		}
	}
	// The Docker image a Dockerfile names does not decide the root filesystem.
	if k := rootfsKey("amd64", "mmdebstrap 1.3.5", &Base{Suite: "bookworm", DockerImage: "debian:other", Packages: []string{"iproute2"}}, src); k != ref {
		t.Error("the Dockerfile's base image changes the root filesystem's key")
	}
}

func TestAccountHooks(t *testing.T) {
	spec, _ := Lookup("agnhost")
	got := strings.Join(accountHooks(spec[0].Base), "\n")
	for _, want := range []string{
		`echo 'user-defined-in-image:x:1000:' >>"$1/etc/group"`,
		`echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$1/etc/passwd"`,
		`echo 'group-defined-in-image:x:50000:user-defined-in-image' >>"$1/etc/group"`,
		`mkdir -p "$1/home/user-defined-in-image" && chown 1000:1000 "$1/home/user-defined-in-image"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("agnhost's account hooks lack\n  %s\nhooks:\n%s", want, got)
		}
	}
}
