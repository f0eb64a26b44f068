package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// imagesDir is the repository's images/, from this package's directory.
const imagesDir = "../../../images"

// The committed Dockerfiles are exactly what the specs generate: change a spec, then run
// `go run ./go-controller/cmd/kovs-images dockerfiles`.
func TestCommittedDockerfilesMatchSpecs(t *testing.T) {
	problems, err := CheckDockerfiles(imagesDir, Catalog())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("images/%s: run `go run ./go-controller/cmd/kovs-images dockerfiles`", p)
	}
}

// Every kovs image has a Dockerfile; the test images have none.
func TestKovsImagesHaveDockerfiles(t *testing.T) {
	for _, s := range Catalog() {
		kovs := strings.HasPrefix(s.Names[0], "docker.io/kovs/")
		if kovs != (s.Dockerfile != "") {
			t.Errorf("image %s: Dockerfile %q (kovs image: %v)", s.Short, s.Dockerfile, kovs)
		}
	}
}

// A Dockerfile says what its spec says: the packages, every file, the config.
func TestDockerfileSaysWhatTheSpecSays(t *testing.T) {
	specs, _ := Lookup("agent", "controller")
	agent, err := Dockerfile(specs[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FROM " + golangDocker + " AS build\n",
		"RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/ ./go-controller/cmd/kovs-agent ./go-controller/cmd/kovsctl ./go-controller/cmd/kovs-cni github.com/containernetworking/plugins/plugins/meta/portmap\n",
		"FROM " + debianDocker + "\n",
		"apt-get install -y --no-install-recommends ca-certificates iproute2 nftables openvswitch-common \\\n",
		"COPY --from=build /out/kovs-agent /usr/local/bin/kovs-agent\n",
		"COPY --from=build /out/kovsctl /usr/local/bin/kovsctl\n",
		"COPY --from=build /out/kovs-cni /opt/kovs/bin/kovs-cni\n",
		"COPY --from=build /out/portmap /opt/kovs/bin/portmap\n",
		"ENV " + DefaultPath + "\n",
		`ENTRYPOINT ["/usr/local/bin/kovs-agent"]` + "\n",
	} {
		if !strings.Contains(agent, want) {
			t.Errorf("agent Dockerfile lacks %q:\n%s", want, agent)
		}
	}
	controller, _ := Dockerfile(specs[0])
	for _, want := range []string{"FROM scratch\n", "USER 65532:65532\n"} {
		if !strings.Contains(controller, want) {
			t.Errorf("controller Dockerfile lacks %q:\n%s", want, controller)
		}
	}
	if strings.Contains(controller, "apt-get") {
		t.Error("a base-less image's Dockerfile installs packages")
	}
}

func TestDockerfileRendersConfig(t *testing.T) {
	s := Spec{
		Short: "x", Names: []string{"docker.io/kovs/x:1"}, About: "x", Dockerfile: "Dockerfile.x",
		Files:        []File{{Src: Source{Kind: KovsBinary, Name: "kovsctl"}, Dest: "/etc/kovsctl.conf", Mode: 0o600}},
		Env:          []string{"GREETING=hello world"},
		WorkDir:      "/work",
		ExposedPorts: []string{"80/tcp", "53/udp"},
		Entrypoint:   []string{"/bin/x", "--flag"},
		Cmd:          []string{"serve"},
	}
	got, err := Dockerfile(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"COPY --from=build --chmod=0600 /out/kovsctl /etc/kovsctl.conf\n",
		`ENV GREETING="hello world"` + "\n",
		"WORKDIR /work\n",
		"EXPOSE 80/tcp 53/udp\n",
		`ENTRYPOINT ["/bin/x", "--flag"]` + "\n",
		`CMD ["serve"]` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, got)
		}
	}
}

func TestDockerfileRefusesWhatItCannotSay(t *testing.T) {
	agnhost, _ := Lookup("agnhost")
	if _, err := Dockerfile(agnhost[0]); err == nil {
		t.Error("agnhost (users, symlinks, Kubernetes binaries) rendered as a Dockerfile")
	}
	s := Spec{Short: "x", Names: []string{"docker.io/kovs/x:1"}, Entrypoint: []string{"/pause"},
		Files: []File{{Src: Source{Kind: K8sBinary, Name: "pause"}, Dest: "/pause", Mode: 0o755}}}
	if _, err := Dockerfile(s); err == nil || !strings.Contains(err.Error(), "can only build kovs binaries") {
		t.Errorf("a Kubernetes binary in a Dockerfile: %v", err)
	}
}

func TestCheckDockerfilesFindsDrift(t *testing.T) {
	dir := t.TempDir()
	specs := Catalog()
	if err := WriteDockerfiles(dir, specs); err != nil {
		t.Fatal(err)
	}
	if problems, _ := CheckDockerfiles(dir, specs); len(problems) != 0 {
		t.Fatalf("freshly written Dockerfiles: %v", problems)
	}
	// A hand edit, a missing file and a stale file are each reported.
	agent := filepath.Join(dir, "Dockerfile.agent")
	b, _ := os.ReadFile(agent)
	_ = os.WriteFile(agent, []byte(strings.Replace(string(b), "nftables ", "", 1)), 0o644)
	_ = os.Remove(filepath.Join(dir, "Dockerfile.ovs"))
	_ = os.WriteFile(filepath.Join(dir, "Dockerfile.old"), []byte("FROM scratch\n"), 0o644)
	problems, err := CheckDockerfiles(dir, specs)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{"Dockerfile.agent: differs", "Dockerfile.ovs: missing", "Dockerfile.old: generated, but no image"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	// Writing again repairs all three.
	if err := WriteDockerfiles(dir, specs); err != nil {
		t.Fatal(err)
	}
	if problems, _ := CheckDockerfiles(dir, specs); len(problems) != 0 {
		t.Errorf("after rewriting: %v", problems)
	}
}
